package cli

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/tempest-actors/tempest/wire/bare"
)

// maxBareInput bounds what tempest bare reads from stdin: hex doubles a
// message, and whitespace may add a little more.
const maxBareInput = 4*bare.DefaultMaxMessageBytes + 1

func init() { addCommand(newBareCmd) }

func newBareCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bare",
		Short: "Encode, decode and check BARE messages against a schema",
		Long: `Transcode between JSON and BARE using a .bare schema, without generated code.

  tempest bare encode --schema s.bare --type Msg < msg.json   # prints lowercase hex
  tempest bare decode --schema s.bare --type Msg < msg.hex    # prints compact JSON
  tempest bare check  --schema s.bare                         # validates the schema

JSON mapping: struct = object keyed by field name; union = {"Member": value};
enum = value name; optional = null or value; void = null; data = base64;
64-bit integers beyond 2^53 as decimal strings; map = object.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newBareTranscodeCmd(true), newBareTranscodeCmd(false), newBareCheckCmd())
	return cmd
}

func newBareCheckCmd() *cobra.Command {
	var schemaPath string
	cmd := &cobra.Command{
		Use:   "check --schema FILE",
		Short: "Validate a BARE schema",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if schemaPath == "" {
				return withCode(2, errors.New("bare check: --schema is required"))
			}
			s, err := bare.ParseSchemaFile(schemaPath)
			if err != nil {
				return fmt.Errorf("bare check: %w", err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: ok, %d types\n", schemaPath, len(s.Types))
			return err
		},
	}
	cmd.Flags().StringVar(&schemaPath, "schema", "", "BARE schema file")
	return cmd
}

func newBareTranscodeCmd(encode bool) *cobra.Command {
	var schemaPath, typeName string
	var binary bool
	name, short := "decode", "Read BARE (hex, or raw with --binary) on stdin and print JSON"
	if encode {
		name, short = "encode", "Read JSON on stdin and print BARE (hex, or raw with --binary)"
	}
	cmd := &cobra.Command{
		Use:   name + " --schema FILE --type NAME",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if schemaPath == "" || typeName == "" {
				return withCode(2, fmt.Errorf("bare %s: --schema and --type are required", name))
			}
			s, err := bare.ParseSchemaFile(schemaPath)
			if err != nil {
				return fmt.Errorf("bare %s: %w", name, err)
			}
			tc := bare.NewTranscoder(s, bare.Config{})
			in, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxBareInput))
			if err != nil {
				return fmt.Errorf("bare %s: reading stdin: %w", name, err)
			}
			if len(in) >= maxBareInput {
				return fmt.Errorf("bare %s: input larger than %d bytes", name, maxBareInput-1)
			}
			out := cmd.OutOrStdout()
			if encode {
				msg, err := tc.JSONToBARE(typeName, in)
				if err != nil {
					return fmt.Errorf("bare encode: %s", oneLine(err))
				}
				if binary {
					_, err = out.Write(msg)
				} else {
					_, err = fmt.Fprintln(out, hex.EncodeToString(msg))
				}
				return err
			}
			msg := in
			if !binary {
				if msg, err = decodeHex(in); err != nil {
					return fmt.Errorf("bare decode: %w", err)
				}
			}
			js, err := tc.BAREToJSON(typeName, msg)
			if err != nil {
				return fmt.Errorf("bare decode: %s", oneLine(err))
			}
			_, err = fmt.Fprintf(out, "%s\n", js)
			return err
		},
	}
	cmd.Flags().StringVar(&schemaPath, "schema", "", "BARE schema file")
	cmd.Flags().StringVar(&typeName, "type", "", "name of the schema type of the message")
	cmd.Flags().BoolVar(&binary, "binary", false, "raw bytes instead of hex")
	return cmd
}

// decodeHex decodes hex text, ignoring whitespace, and names the offset
// (in the text) of the first bad character.
func decodeHex(in []byte) ([]byte, error) {
	var digits []byte
	var where []int
	for i, c := range in {
		if unicode.IsSpace(rune(c)) {
			continue
		}
		digits = append(digits, c)
		where = append(where, i)
	}
	out := make([]byte, hex.DecodedLen(len(digits)))
	if _, err := hex.Decode(out, digits); err != nil {
		var inv hex.InvalidByteError
		if errors.As(err, &inv) {
			for i, c := range digits {
				if c == byte(inv) {
					return nil, fmt.Errorf("invalid hex character %q at input offset %d", c, where[i])
				}
			}
		}
		if errors.Is(err, hex.ErrLength) {
			return nil, errors.New("odd number of hex digits")
		}
		return nil, err
	}
	return out, nil
}

// oneLine keeps an error message on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ")), " ")
}
