// Package form holds the BARE form of the assumption manifest, generated
// from manifest.bare. Package manifest converts to and from it.
package form

//go:generate go run github.com/tempest-actors/tempest/wire/bare/cmd/baregen -schema manifest.bare -package form -out manifest_bare.go
