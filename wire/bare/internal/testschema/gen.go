// Package testschema holds code generated from test.bare, used to test the
// generator and the runtime and to benchmark them.
package testschema

//go:generate go run github.com/tempest-actors/tempest/wire/bare/cmd/baregen -schema test.bare -package testschema -out test_bare.go
