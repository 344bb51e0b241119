package federation

//go:generate go run github.com/tempest-actors/tempest/wire/bare/cmd/baregen -schema federation.bare -package federation -out federation_bare.go
