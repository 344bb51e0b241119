package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dashboardFile is the Grafana dashboard shipped for the node metrics.
const dashboardFile = "../deploy/grafana/tempest-dashboard.json"

// checkExposition checks the /metrics of running nodes: promtool finds
// nothing to complain about, and every series the Grafana dashboard
// queries is exposed by at least one of them (some only by the leader).
func checkExposition(t *testing.T, addrs ...string) {
	t.Helper()
	var scrapes []string
	for _, a := range addrs {
		resp, err := http.Get(a + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s/metrics: %d %v", a, resp.StatusCode, err)
		}
		scrapes = append(scrapes, string(b))
	}
	t.Run("promtool", func(t *testing.T) {
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			t.Skip("promtool is not installed (Debian package prometheus): the exposition is not linted")
		}
		for i, s := range scrapes {
			cmd := exec.Command(promtool, "check", "metrics")
			cmd.Stdin = strings.NewReader(s)
			out, err := cmd.CombinedOutput()
			if err != nil || len(bytes.TrimSpace(out)) != 0 {
				t.Errorf("promtool check metrics on %s: %v\n%s", addrs[i], err, out)
			}
		}
	})
	t.Run("grafana", func(t *testing.T) {
		series, err := dashboardSeries(dashboardFile)
		if err != nil {
			t.Fatal(err)
		}
		if len(series) < 20 {
			t.Fatalf("only %d series found in %s: %v", len(series), dashboardFile, series)
		}
		exposed := map[string]bool{}
		for _, s := range scrapes {
			for line := range strings.Lines(s) {
				if name, _, ok := strings.Cut(line, "{"); ok && !strings.HasPrefix(line, "#") {
					exposed[name] = true
				} else if name, _, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
					exposed[name] = true
				}
			}
		}
		for _, name := range series {
			if !exposed[name] {
				t.Errorf("the dashboard queries %s, which no node exposes", name)
			}
		}
	})
}

var seriesName = regexp.MustCompile(`\btempest_[a-z0-9_]+`)

// dashboardSeries returns the tempest_ series named in the PromQL of a
// Grafana dashboard's panels and template variables.
func dashboardSeries(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	var names []string
	for _, e := range exprs {
		names = append(names, seriesName.FindAllString(e, -1)...)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
