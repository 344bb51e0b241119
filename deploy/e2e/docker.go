package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// cluster drives the compose project with the docker and compose CLIs.
type cluster struct {
	compose []string // e.g. ["docker", "compose"] or ["docker-compose"]
	files   []string
	project string
	env     []string
	ids     map[string]string // service -> container id
	network string            // the project's network name
	subnet  string            // address prefix, e.g. 10.213.77
}

// run runs a command and returns its combined output.
func runCmd(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out.String(), 2000))
	}
	return out.String(), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func head(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// crashStart is where the Go runtime's report of a crash begins in a
// process's output, or -1.
func crashStart(s string) int {
	for _, m := range []string{"\npanic: ", "\nfatal error: ", "\nSIG"} {
		if i := strings.Index(s, m); i >= 0 {
			return i + 1
		}
	}
	return -1
}

func (c *cluster) composeCmd(ctx context.Context, args ...string) (string, error) {
	full := append([]string{}, c.compose[1:]...)
	for _, f := range c.files {
		full = append(full, "-f", f)
	}
	full = append(full, "-p", c.project)
	full = append(full, args...)
	return runCmd(ctx, c.env, c.compose[0], full...)
}

func (c *cluster) docker(ctx context.Context, args ...string) (string, error) {
	return runCmd(ctx, c.env, "docker", args...)
}

// resolveIDs looks up the container of each node service and the network.
func (c *cluster) resolveIDs(ctx context.Context, services []string) error {
	c.ids = map[string]string{}
	for _, s := range services {
		out, err := c.composeCmd(ctx, "ps", "-q", s)
		if err != nil {
			return err
		}
		id := strings.TrimSpace(out)
		if id == "" {
			return fmt.Errorf("no container for service %s", s)
		}
		c.ids[s] = id
	}
	out, err := c.docker(ctx, "inspect", "-f", "{{json .NetworkSettings.Networks}}", c.ids[services[0]])
	if err != nil {
		return err
	}
	var nets map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &nets); err != nil {
		return fmt.Errorf("networks of %s: %w", services[0], err)
	}
	for n := range nets {
		c.network = n
	}
	if len(nets) != 1 {
		return fmt.Errorf("want one network on %s, have %v", services[0], nets)
	}
	return nil
}

// health is the container's health status ("healthy", "unhealthy",
// "starting"), or its state when it is not running.
func (c *cluster) health(ctx context.Context, node string) string {
	out, err := c.docker(ctx, "inspect", "-f", "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}", c.ids[node])
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(out)
	if len(f) == 2 && f[0] == "running" {
		return f[1]
	}
	if len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

// exec runs /tempest inside the node's container (there is no shell).
func (c *cluster) exec(ctx context.Context, node string, args ...string) (string, error) {
	return c.docker(ctx, append([]string{"exec", c.ids[node], "/tempest"}, args...)...)
}

// logs returns the container's output (stdout and stderr) since it was
// created, across restarts.
func (c *cluster) logs(ctx context.Context, node string) (string, error) {
	return c.docker(ctx, "logs", c.ids[node])
}
