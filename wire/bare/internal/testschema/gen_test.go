package testschema_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/tempest-actors/tempest/wire/bare"
	"github.com/tempest-actors/tempest/wire/bare/gen"
	ts "github.com/tempest-actors/tempest/wire/bare/internal/testschema"
)

// The checked-in generated code must be what the generator produces now.
func TestGeneratedCodeIsFresh(t *testing.T) {
	if err := gen.CheckFile("test.bare", "test_bare.go", "testschema"); err != nil {
		t.Fatal(err)
	}
}

func hexOf(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func customer() *ts.Customer {
	return &ts.Customer{
		Name:     "Ann",
		Email:    "a@b",
		Address:  ts.Address{"1", "2", "3", "4"},
		Orders:   []ts.CustomerOrders{{OrderId: 5, Quantity: -1}},
		Metadata: map[string][]byte{"k": {0xff}},
	}
}

// Hand-computed encodings of the draft's example types.
func TestDraftExampleVectors(t *testing.T) {
	cases := []struct {
		name string
		v    ts.Person
		hex  string
	}{
		{"customer", customer(),
			"00" + "03416e6e" + "03614062" + "0131 0132 0133 0134" +
				"01 0500000000000000 ffffffff" + "01 016b 01ff"},
		{"employee", &ts.Employee{
			Name: "B", Department: ts.DepartmentJsmith, HireDate: "2020",
			Metadata: map[string][]byte{},
		}, "01" + "0142" + "00" + "00000000" + "63" + "0432303230" + "00" + "00"},
		{"employee with key", &ts.Employee{
			Name: "B", Department: ts.DepartmentCustomerService, PublicKey: &ts.PublicKey{1, 127: 9},
		}, "01" + "0142" + "00" + "00000000" + "02" + "00" + "01" + "01" + strings.Repeat("00", 126) + "09" + "00"},
		{"terminated", ts.TerminatedEmployee{}, "02"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := hexOf(t, c.hex)
			got, err := ts.MarshalPerson(c.v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoded\n%x\nwant\n%x", got, want)
			}
			back, err := ts.UnmarshalPerson(want)
			if err != nil {
				t.Fatal(err)
			}
			if e, ok := back.(*ts.Employee); ok && e.Metadata == nil {
				e.Metadata = map[string][]byte{}
			}
			if e, ok := c.v.(*ts.Employee); ok && e.Metadata == nil {
				e.Metadata = map[string][]byte{}
			}
			if !reflect.DeepEqual(back, c.v) {
				t.Fatalf("decoded %#v, want %#v", back, c.v)
			}
		})
	}
}

func fullAll() *ts.All {
	s := "hi"
	ol := []uint8{1, 2}
	return &ts.All{
		U: math.MaxUint64, I: math.MinInt64, A8: 1, A16: 2, A32: 3, A64: 4,
		B8: -1, B16: -2, B32: -3, B64: -4, F32: 1.5, F64: -0.25, B: true,
		S: "héllo", D: []byte{1, 2, 3}, D4: [4]byte{9, 8, 7, 6}, E: ts.DepartmentDevelopment,
		O: &s, Ol: &ol, L: []uint16{1, 65535}, L3: [3]bool{true, false, true},
		M:  map[string]int32{"b": 2, "a": 1},
		Mk: map[ts.Department]ts.Flag{ts.DepartmentJsmith: true, ts.DepartmentAccounting: false},
		Mb: map[bool]string{true: "t", false: "f"},
		V:  ts.ValueU32(7), Ov: &ts.ValueMember9{K: "k"},
		Nest:  ts.AllNest{X: 3, Y: &ts.Bytes{4}},
		Alias: true,
	}
}

func TestAllRoundTrip(t *testing.T) {
	v := fullAll()
	b, err := v.MarshalBARE()
	if err != nil {
		t.Fatal(err)
	}
	var back ts.All
	if err := back.UnmarshalBARE(b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, v) {
		t.Fatalf("round trip:\n%#v\nwant\n%#v", &back, v)
	}
	// Maps are written in sorted key order, so encoding is deterministic.
	if !bytes.Contains(b, hexOf(t, "02 0161 01000000 0162 02000000")) {
		t.Fatalf("map M not sorted in %x", b)
	}
	if !bytes.Contains(b, hexOf(t, "02 00 00 63 01")) {
		t.Fatalf("map Mk not sorted in %x", b)
	}
	if !bytes.Contains(b, hexOf(t, "02 00 0166 01 0174")) {
		t.Fatalf("map Mb not sorted in %x", b)
	}
	// Every prefix is rejected as short input, never a panic.
	for i := range b {
		var x ts.All
		if err := x.UnmarshalBARE(b[:i]); !errors.Is(err, bare.ErrShortInput) {
			t.Fatalf("prefix %d: err = %v", i, err)
		}
	}
	// A trailing byte is rejected.
	if err := back.UnmarshalBARE(append(b, 0)); !errors.Is(err, bare.ErrTrailingBytes) {
		t.Fatalf("trailing: %v", err)
	}
}

func TestUnionMembers(t *testing.T) {
	vals := []struct {
		v   ts.Value
		hex string
	}{
		{ts.ValueStr("x"), "00 0178"},
		{ts.ValueU32(1), "04 01000000"},
		{ts.ValueVoid{}, "05"},
		{&ts.Employee{Address: ts.Address{}, Metadata: map[string][]byte{}}, "06 00 00 00000000 00 00 00 00"},
		{ts.ValueMember7{"a"}, "07 01 0161"},
		{ts.Get{}, "08"},
		{&ts.ValueMember9{K: "z"}, "09 017a"},
	}
	for _, c := range vals {
		want := hexOf(t, c.hex)
		got, err := ts.MarshalValue(c.v)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%T: got %x, %v; want %x", c.v, got, err, want)
			continue
		}
		back, err := ts.UnmarshalValue(want)
		if err != nil || !reflect.DeepEqual(back, c.v) {
			t.Errorf("%T: decoded %#v, %v", c.v, back, err)
		}
	}
}

func TestCounterOps(t *testing.T) {
	ops := ts.Ops{ts.Get{}, &ts.Add{Delta: -3}, ts.Get{}}
	b, err := ops.MarshalBARE()
	if err != nil {
		t.Fatal(err)
	}
	if want := hexOf(t, "03 00 03 fdffffffffffffff 00"); !bytes.Equal(b, want) {
		t.Fatalf("got %x, want %x", b, want)
	}
	var back ts.Ops
	if err := back.UnmarshalBARE(b); err != nil || !reflect.DeepEqual(back, ops) {
		t.Fatalf("decoded %#v, %v", back, err)
	}
}

func decodeErr(t *testing.T, err error, reason error, offset int) {
	t.Helper()
	var de *bare.DecodeError
	if !errors.Is(err, reason) || !errors.As(err, &de) || de.Offset != offset {
		t.Fatalf("err = %v, want %v at offset %d", err, reason, offset)
	}
}

func TestStrictDecoding(t *testing.T) {
	var p ts.Person
	_, err := ts.UnmarshalPerson(hexOf(t, "03"))
	decodeErr(t, err, bare.ErrUnknownUnionTag, 0)
	_ = p
	// Unknown enum value 4 in Employee.department (offset 1+2+1+4 = 8).
	_, err = ts.UnmarshalPerson(hexOf(t, "01 0142 00 00000000 04 00 00 00"))
	decodeErr(t, err, bare.ErrUnknownEnum, 8)
	// Duplicate map key in Customer.metadata.
	_, err = ts.UnmarshalPerson(hexOf(t, "00 00 00 00000000 00 02 0161 00 0161 00"))
	decodeErr(t, err, bare.ErrDuplicateMapKey, 12)
	// Optional tag 2 in Employee.publicKey.
	_, err = ts.UnmarshalPerson(hexOf(t, "01 00 00 00000000 00 00 02 00"))
	decodeErr(t, err, bare.ErrInvalidOptional, 9)
	// Invalid UTF-8 in Customer.name.
	_, err = ts.UnmarshalPerson(hexOf(t, "00 01ff"))
	decodeErr(t, err, bare.ErrInvalidUTF8, 2)
	// A list count larger than the input.
	var tr ts.Tree
	decodeErr(t, tr.UnmarshalBARE(hexOf(t, "00 05 00")), bare.ErrShortInput, 1)
	decodeErr(t, tr.UnmarshalBARE(hexOf(t, "00 ffffff7f")), bare.ErrLimit, 1)
	// Recursion deeper than the limit.
	deep := bytes.Repeat([]byte{0, 1}, 100) // Tree{label:"", kids:[ ... ]}
	decodeErr(t, tr.UnmarshalBARE(deep), bare.ErrDepth, 128)
	var n ts.Node
	decodeErr(t, n.UnmarshalBARE(bytes.Repeat([]byte{2, 1}, 70)), bare.ErrDepth, 128)
}

func TestEncodeErrors(t *testing.T) {
	v := fullAll()
	v.E = 42
	if _, err := v.MarshalBARE(); !errors.Is(err, bare.ErrInvalidValue) || !strings.HasPrefix(err.Error(), "E: ") {
		t.Fatalf("bad enum: %v", err)
	}
	v = fullAll()
	v.V = nil
	if _, err := v.MarshalBARE(); !errors.Is(err, bare.ErrNilUnion) {
		t.Fatalf("nil union: %v", err)
	}
	c := customer()
	c.Address[2] = "\xff"
	if _, err := c.MarshalBARE(); !errors.Is(err, bare.ErrInvalidUTF8) || !strings.HasPrefix(err.Error(), "Address[2]: ") {
		t.Fatalf("bad utf8: %v", err)
	}
	if _, err := ts.MarshalOp((*ts.Add)(nil)); !errors.Is(err, bare.ErrNilUnion) {
		t.Fatalf("nil member: %v", err)
	}
}

func TestZeroCopyData(t *testing.T) {
	e := &ts.Envelope{To: "counter/1", Payload: []byte("abc")}
	b, _ := e.MarshalBARE()
	var back ts.Envelope
	d := bare.NewDecoder(b, bare.Config{ZeroCopy: true})
	back.DecodeBARE(d)
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	if &back.Payload[0] != &b[len(b)-4] {
		t.Fatal("payload does not alias the input")
	}
}

func envelope() *ts.Envelope {
	dl := uint64(5_000_000_000)
	return &ts.Envelope{To: "counter/user-42", From: 7, AskId: 123456789, Kind: 3,
		Deadline: &dl, Payload: bytes.Repeat([]byte{0xab}, 100), Hops: []uint64{1, 2, 3}}
}

func TestEnvelopeAllocs(t *testing.T) {
	e := envelope()
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() {
		b, err := e.AppendBARE(buf[:0])
		if err != nil {
			t.Fatal(err)
		}
		buf = b
	}); n != 0 {
		t.Fatalf("encode: %v allocs, want 0", n)
	}
	var back ts.Envelope
	if err := back.UnmarshalBARE(buf); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := back.UnmarshalBARE(buf); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Fatalf("decode: %v allocs, want at most 1", n)
	}
	if !reflect.DeepEqual(&back, e) {
		t.Fatalf("decoded %#v", back)
	}
}

func TestNamedAliases(t *testing.T) {
	r := &ts.Roster{
		Staff:  []ts.Staff{{Name: "a", Department: ts.DepartmentDevelopment}},
		ByDept: map[ts.Dept]ts.People{ts.Dept(ts.DepartmentJsmith): ts.TerminatedEmployee{}},
		Gone:   []ts.Change{ts.Gone{}, &ts.Staff{Name: "b"}, ts.Dept(ts.DepartmentAccounting)},
	}
	b, err := r.MarshalBARE()
	if err != nil {
		t.Fatal(err)
	}
	emp := "0161" + "00" + "00000000" + "03" + "00" + "00" + "00"
	want := hexOf(t, "01"+emp+"01 63 02"+"03 00 01 0162 00 00000000 00 00 00 00 02 00")
	if !bytes.Equal(b, want) {
		t.Fatalf("got  %x\nwant %x", b, want)
	}
	var back ts.Roster
	if err := back.UnmarshalBARE(b); err != nil {
		t.Fatal(err)
	}
	if s := back.Gone[1].(*ts.Staff); s.Name != "b" || back.Staff[0].Department != ts.DepartmentDevelopment {
		t.Fatalf("decoded %#v", back)
	}
	if _, ok := back.ByDept[ts.Dept(ts.DepartmentJsmith)].(ts.TerminatedEmployee); !ok {
		t.Fatalf("decoded %#v", back.ByDept)
	}
	if _, err := (&ts.Roster{Gone: []ts.Change{ts.Dept(7)}}).MarshalBARE(); !errors.Is(err, bare.ErrInvalidValue) || !strings.HasPrefix(err.Error(), "Gone[0].Dept: ") {
		t.Fatalf("bad enum through alias: %v", err)
	}
}
