package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const bareTestSchema = `
type Get void
type Add struct { delta: i64 }
type Op union { Get | Add = 3 }
type Envelope struct {
  to: str
  askId: u64
  deadline: optional<u64>
  payload: data
  op: Op
}
`

func writeSchema(t *testing.T, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "s.bare")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runBare(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(t.Context(), append([]string{"bare"}, args...), strings.NewReader(stdin), &out, &errOut)
	return out.String(), err
}

func TestBareEncodeDecode(t *testing.T) {
	schema := writeSchema(t, bareTestSchema)
	js := `{"to":"counter/1","askId":"18446744073709551615","deadline":null,"payload":"AQI=","op":{"Add":{"delta":-3}}}`
	out, err := runBare(t, js, "encode", "--schema", schema, "--type", "Envelope")
	if err != nil {
		t.Fatal(err)
	}
	const wantHex = "09636f756e7465722f31" + "ffffffffffffffff" + "00" + "020102" + "03" + "fdffffffffffffff"
	if out != wantHex+"\n" {
		t.Fatalf("encode = %q, want %q", out, wantHex)
	}
	// Whitespace in hex input is ignored.
	spaced := wantHex[:6] + " \n\t" + wantHex[6:]
	out, err = runBare(t, spaced, "decode", "--schema", schema, "--type", "Envelope")
	if err != nil {
		t.Fatal(err)
	}
	// A u64 given as a string comes back as a number, whatever its size.
	wantJS := strings.Replace(js, `"askId":"18446744073709551615"`, `"askId":18446744073709551615`, 1)
	if out != wantJS+"\n" {
		t.Fatalf("decode = %q, want %q", out, wantJS)
	}
	// --binary both ways.
	raw, err := runBare(t, js, "encode", "--binary", "--schema", schema, "--type", "Envelope")
	if err != nil {
		t.Fatal(err)
	}
	out, err = runBare(t, raw, "decode", "--binary", "--schema", schema, "--type", "Envelope")
	if err != nil || out != wantJS+"\n" {
		t.Fatalf("binary decode = %q, %v", out, err)
	}
	out, err = runBare(t, `{"Get":null}`, "encode", "--schema", schema, "--type", "Op")
	if err != nil || out != "00\n" {
		t.Fatalf("Op Get = %q, %v", out, err)
	}
}

func TestBareCheck(t *testing.T) {
	out, err := runBare(t, "", "check", "--schema", writeSchema(t, bareTestSchema))
	if err != nil || !strings.HasSuffix(out, ": ok, 4 types\n") {
		t.Fatalf("check = %q, %v", out, err)
	}
}

func TestBareErrors(t *testing.T) {
	good := writeSchema(t, bareTestSchema)
	bad := writeSchema(t, "type A struct {\n  a: Nope\n}")
	cases := []struct {
		name  string
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"bad schema", "", []string{"check", "--schema", bad}, 1, "s.bare:2:6: undefined type Nope"},
		{"missing schema flag", "", []string{"check"}, 2, "--schema is required"},
		{"missing type flag", "", []string{"encode", "--schema", good}, 2, "--schema and --type are required"},
		{"unknown flag", "", []string{"encode", "--bogus"}, 2, "unknown flag"},
		{"unknown type", "{}", []string{"encode", "--schema", good, "--type", "Nope"}, 1, `unknown type "Nope"`},
		{"missing field", `{"to":"x"}`, []string{"encode", "--schema", good, "--type", "Envelope"}, 1, "$.askId: missing field"},
		{"bad hex", "0g", []string{"decode", "--schema", good, "--type", "Op"}, 1, `invalid hex character 'g' at input offset 1`},
		{"odd hex", "000", []string{"decode", "--schema", good, "--type", "Op"}, 1, "odd number of hex digits"},
		{"unknown tag", "01", []string{"decode", "--schema", good, "--type", "Op"}, 1, "offset 0: bare: unknown union tag"},
		{"trailing", "0000", []string{"decode", "--schema", good, "--type", "Op"}, 1, "offset 1: bare: trailing bytes"},
		{"non-minimal", "0380", []string{"decode", "--schema", good, "--type", "Op"}, 1, "offset 1: bare: unexpected end of input"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := runBare(t, c.stdin, c.args...)
			if err == nil {
				t.Fatal("succeeded")
			}
			if got := exitCode(err); got != c.code {
				t.Errorf("exit code %d, want %d", got, c.code)
			}
			if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q, want one line containing %q", msg, c.want)
			}
		})
	}
}
