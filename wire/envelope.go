package wire

//go:generate go run github.com/tempest-actors/tempest/wire/bare/cmd/baregen -schema envelope.bare -package wire -out envelope_bare.go
