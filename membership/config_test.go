package membership_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/membership"
)

func TestConfigValidate(t *testing.T) {
	ok := membership.DefaultConfig()
	ok.Name = "a"
	if err := ok.Validate(); err != nil {
		t.Fatalf("default config with a name: %v", err)
	}
	if err := (membership.Config{Name: "a"}).Validate(); err != nil {
		t.Fatalf("zero config with a name: %v", err)
	}
	bad := map[string]func(*membership.Config){
		"no name":            func(c *membership.Config) { c.Name = "" },
		"meta name differs":  func(c *membership.Config) { c.Meta.Name = "b" },
		"bind without port":  func(c *membership.Config) { c.Bind = "0.0.0.0" },
		"bind hostname":      func(c *membership.Config) { c.Bind = "example.com:7946" },
		"advertise hostname": func(c *membership.Config) { c.Advertise = "example.com:7946" },
		"bad seed port":      func(c *membership.Config) { c.Seeds = []string{"a.example:x"} },
		"empty seed":         func(c *membership.Config) { c.Seeds = []string{" "} },
		"short key":          func(c *membership.Config) { c.GossipKeys = [][]byte{make([]byte, 10)} },
		"probe timeout":      func(c *membership.Config) { c.Timing.ProbeTimeout = 2 * c.Timing.ProbeInterval },
		"negative":           func(c *membership.Config) { c.Timing.RejoinInterval = -time.Second },
		"backoff order":      func(c *membership.Config) { c.Timing.JoinBackoffMin = time.Hour },
	}
	for name, mutate := range bad {
		c := ok
		mutate(&c)
		if err := c.Validate(); !errors.Is(err, membership.ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v, want ErrInvalidConfig", name, err)
		}
	}
	good := map[string]func(*membership.Config){
		"seeds": func(c *membership.Config) {
			c.Seeds = []string{"a", "a:1", "10.0.0.1", "[::1]:7000", "::1", "[fe80::1]"}
		},
		"advertise ip":   func(c *membership.Config) { c.Advertise = "10.1.2.3" },
		"advertise port": func(c *membership.Config) { c.Advertise = "10.1.2.3:9000" },
		"ephemeral bind": func(c *membership.Config) { c.Bind = "127.0.0.1:0" },
		"fast timing":    func(c *membership.Config) { c.Timing = membership.FastTiming() },
		"aes-128":        func(c *membership.Config) { c.GossipKeys = [][]byte{make([]byte, 16)} },
	}
	for name, mutate := range good {
		c := ok
		mutate(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}
