// Package testmsg holds BARE message types for tests: generated structs
// of several shapes that tests register as actor mail.
package testmsg

//go:generate go run github.com/tempest-actors/tempest/wire/bare/cmd/baregen -schema testmsg.bare -package testmsg -out testmsg_bare.go
