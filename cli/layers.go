package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// envPrefix starts every environment variable that sets a flag:
// --data-dir is TEMPEST_DATA_DIR.
const envPrefix = "TEMPEST_"

// envName is the environment variable of a flag.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// configError is an invalid configuration: one line naming the flag.
// It exits with code 2, like a usage error.
func configError(flag, format string, args ...any) error {
	return withCode(exitUsage, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
}

// applyLayers fills every flag of fs that was not given on the command
// line from, in order, its environment variable (TEMPEST_<FLAG>) and the
// YAML file named by the flag configFlag (when fs has it and it is set),
// so that the precedence is flag > env > file > default. skip names flags
// that are never read from the environment or the file.
func applyLayers(fs *pflag.FlagSet, getenv func(string) string, configFlag string, skip ...string) error {
	// The config file's own path may come from the environment.
	if f := fs.Lookup(configFlag); f != nil && !f.Changed {
		if v := getenv(envName(configFlag)); v != "" {
			if err := fs.Set(configFlag, v); err != nil {
				return configError(configFlag, "%v", err)
			}
		}
	}
	var file map[string]json.RawMessage
	if f := fs.Lookup(configFlag); f != nil && f.Value.String() != "" {
		m, err := readConfigFile(f.Value.String())
		if err != nil {
			return configError(configFlag, "%v", err)
		}
		file = m
		for k := range file {
			if k == configFlag || slices.Contains(skip, k) || fs.Lookup(k) == nil {
				return configError(configFlag, "%s: unknown key %q", f.Value.String(), k)
			}
		}
	}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == configFlag || slices.Contains(skip, f.Name) {
			return
		}
		if v, ok := lookupEnv(getenv, envName(f.Name)); ok {
			if serr := setFlag(fs, f, v); serr != nil {
				err = configError(f.Name, "invalid value %q from $%s: %v", v, envName(f.Name), serr)
			}
			return
		}
		if raw, ok := file[f.Name]; ok {
			v, cerr := yamlValue(raw)
			if cerr == nil {
				cerr = setFlag(fs, f, v)
			}
			if cerr != nil {
				err = configError(f.Name, "invalid value in the config file: %v", cerr)
			}
		}
	})
	return err
}

// lookupEnv treats an empty variable as unset.
func lookupEnv(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

// setFlag sets f to v; a list flag's value replaces the default rather
// than appending to it. An empty item ("a,,b", ",") is refused, as the
// flag refuses it: a list that was set but holds nothing must not pass
// for one that was not set.
func setFlag(fs *pflag.FlagSet, f *pflag.Flag, v string) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		var items []string
		if v == "" {
			return sv.Replace(items) // an empty list in the config file
		}
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				return errors.New("an empty item in the comma-separated list")
			}
			items = append(items, s)
		}
		return sv.Replace(items)
	}
	return fs.Set(f.Name, v)
}

func readConfigFile(path string) (map[string]json.RawMessage, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	js, err := yaml.YAMLToJSONStrict(b) // a key given twice is an error, not a silent choice
	if err != nil {
		// One line: the decoder lists its errors on lines of their own.
		return nil, fmt.Errorf("%s: %s", path, strings.Join(strings.Fields(err.Error()), " "))
	}
	var m map[string]json.RawMessage
	if string(js) == "null" {
		return map[string]json.RawMessage{}, nil
	}
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, fmt.Errorf("%s: the top level must be a mapping of flag names to values", path)
	}
	return m, nil
}

// yamlValue renders one config-file value as flag text: strings as is,
// numbers and booleans literally, lists joined by commas.
func yamlValue(raw json.RawMessage) (string, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			s, err := yamlValue(mustJSON(e))
			if err != nil {
				return "", err
			}
			if strings.TrimSpace(s) == "" {
				return "", errors.New("an empty item in the list")
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	case nil:
		return "", nil
	}
	return "", errors.New("expected a string, number, boolean or list")
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
