// Package kinds is a node's registry of what its kinds exchange: the
// message types (tag, BARE name, Go types and codec) every kind declares,
// the application error codes that keep an error's identity across
// nodes, and the JSON gateway of a kind (its schema's input and reply
// types, mapped to the registered messages).
//
// The model: a node fills the tables while kinds are registered (Check
// reports why a kind's declarations cannot be added, without adding
// them; Add adds them), and only reads them from Start on, so reads take
// no lock. A tag means one message on the node, whichever kinds list it;
// a Go type has one tag; an error sentinel has one code. The root
// package keeps the public types (tempest.Message, tempest.Gateway,
// tempest.KindOptions) and converts them into the values here.
package kinds
