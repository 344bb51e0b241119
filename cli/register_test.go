package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
)

// registerGreeter is a program's own kind, as Options.Register adds it:
// it answers an EchoIn with a greeting.
func registerGreeter(n *tempest.Node) error {
	return n.Register("greeter", func(key string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			switch m := msg.(type) {
			case demo.EchoIn:
				ctx.Reply(demo.EchoIn{Text: "hello " + m.Text + " from " + key})
			case *demo.EchoIn:
				ctx.Reply(demo.EchoIn{Text: "hello " + m.Text + " from " + key})
			}
		})
	}, tempest.KindOptions{
		Messages: []tempest.Message{tempest.SchemaMessage[demo.EchoIn]()},
		Gateway:  &tempest.Gateway{Schema: demo.Schema, Input: "EchoIn", Reply: "EchoIn"},
	})
}

// The agent hosts the kinds a program registers through Options.Register
// beside the demo kinds.
func TestAgentHostsTheProgramsKinds(t *testing.T) {
	leakCheck(t)
	c := defaultAgentConfig()
	c.Name, c.DataDir, c.InsecureDev = "solo", t.TempDir(), true
	c.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	c.register = registerGreeter
	_, stop := runAgentInProcess(t, c, nil)
	addr := "http://" + c.HTTPAddr
	waitFor(t, 20*time.Second, "the agent ready", func() bool {
		_, _, err := cli(t, "health", "--addr", addr)
		return err == nil
	})
	if got, _, err := cli(t, "ask", "greeter/a", `{"text":"you"}`, "--addr", addr); err != nil || got != "{\"text\":\"hello you from a\"}\n" {
		t.Fatalf("ask the program's kind: %q %v", got, err)
	}
	if got, _, err := cli(t, "ask", "counter/a", `{"Add":{"n":3}}`, "--addr", addr); err != nil || got != "{\"n\":3}\n" {
		t.Fatalf("ask a demo kind: %q %v", got, err)
	}
	if err := stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
}

// A program whose registration fails does not start a node.
func TestAgentRefusesToStartWhenRegisterFails(t *testing.T) {
	leakCheck(t)
	c := defaultAgentConfig()
	c.Name, c.DataDir, c.InsecureDev = "solo", t.TempDir(), true
	c.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	errBad := errors.New("bad kind")
	c.register = func(*tempest.Node) error { return errBad }
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := runAgent(ctx, c, func(string) string { return "" }, &syncBuilder{}, &syncBuilder{})
	if !errors.Is(err, errBad) || !strings.Contains(err.Error(), "program's kinds") {
		t.Fatalf("runAgent: %v, want the registration's error", err)
	}
	if ctx.Err() != nil {
		t.Fatal("runAgent waited for its context instead of failing")
	}
}

// A program that names itself (Options.Name) is called so in its usage
// lines, not tempest.
func TestProgramNameInUsage(t *testing.T) {
	defer func(p string) { program = p }(program)
	program = "bankagent"
	out, _, err := cli(t, "--help")
	if err != nil || !strings.Contains(out, "bankagent [command]") || strings.Contains(out, "tempest [command]") {
		t.Fatalf("help of a program named bankagent: %v\n%s", err, out)
	}
	out, _, err = cli(t, "ask", "--help")
	if err != nil || !strings.Contains(out, "bankagent ask counter/") || strings.Contains(out, "tempest ask") {
		t.Fatalf("ask --help of a program named bankagent: %v\n%s", err, out)
	}
	out, _, err = cli(t, "agent", "--help")
	if err != nil || !strings.Contains(out, "bankagent keygen") || strings.Contains(out, "tempest keygen") {
		t.Fatalf("agent --help of a program named bankagent: %v\n%s", err, out)
	}
}

// A mistyped command, subcommand or help topic, and arguments a command
// does not take, are usage errors (exit 2), never success; a group
// command alone prints its help.
func TestUnknownCommandsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"nosuchcmd"},
		{"certs", "bogus"},
		{"secrets", "bogus"},
		{"bare", "bogus"},
		{"help", "nosuch"},
		{"version", "extra"},
		{"certs", "ca", "extra"},
		{"completion", "zzz"},
	} {
		if _, err := runCLI(t, args...); exitCode(err) != 2 {
			t.Errorf("%v: exit code %d (err %v), want 2", args, exitCode(err), err)
		}
	}
	for _, args := range [][]string{{"certs"}, {"help", "certs"}, {"help"}, {"help", "certs", "node"}, {"completion"}} {
		if out, err := runCLI(t, args...); err != nil || !strings.Contains(out, "Usage:") {
			t.Errorf("%v: %v, output %q; want its help", args, err, out)
		}
	}
}
