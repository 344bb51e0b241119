package demo_test

import (
	"testing"

	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/wire/bare"
	"github.com/tempest-actors/tempest/wire/bare/gen"
)

func TestGeneratedFresh(t *testing.T) {
	if err := gen.CheckFile("demo.bare", "demo_bare.go", "demo"); err != nil {
		t.Fatal(err)
	}
}

func TestCounterValueRoundTrip(t *testing.T) {
	b, err := (&demo.CounterValue{N: -42}).MarshalBARE()
	if err != nil {
		t.Fatal(err)
	}
	var got demo.CounterValue
	if err := got.UnmarshalBARE(b); err != nil || got.N != -42 {
		t.Fatalf("got %+v, %v", got, err)
	}
	// The counter's input union, as the JSON gateway sees it.
	s, err := bare.ParseSchema("demo.bare", []byte(demo.Schema))
	if err != nil {
		t.Fatal(err)
	}
	tc := bare.NewTranscoder(s, bare.Config{})
	in, err := tc.JSONToBARE("CounterIn", []byte(`{"Add":{"n":5}}`))
	if err != nil {
		t.Fatal(err)
	}
	v, err := demo.UnmarshalCounterIn(in)
	if add, ok := v.(*demo.Add); err != nil || !ok || add.N != 5 {
		t.Fatalf("decoded %#v, %v", v, err)
	}
}
