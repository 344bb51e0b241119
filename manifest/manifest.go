// Package manifest describes what a Tempest node's scheduler guarantees
// itself and what it assumes from the substrate beneath it: the
// assumption manifest.
//
// A manifest is computed from the node's real configuration and its
// detected environment (see Detect and Build), published to the cluster
// (its Digest travels in gossip metadata), shown by the CLI, and used by
// placement: a kind may require that a clause be Discharged on the node
// that hosts it.
//
// Manifests are plain values: safe to copy and to share between
// goroutines once built.
package manifest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Profile names the kind of substrate a scheduler runs on.
type Profile uint8

// Profiles, from the most self-sufficient to the simulated one.
const (
	Freestanding Profile = iota // no OS beneath: the scheduler owns the machine
	MicroVM                     // a microVM with vCPU quota from its deployment
	Container                   // a container whose CPU budget is only observable
	Hosted                      // a process on a general-purpose OS
	Simulated                   // a deterministic, seeded, virtual-time scheduler
)

var profileNames = [...]string{"Freestanding", "MicroVM", "Container", "Hosted", "Simulated"}

func (p Profile) String() string { return enumString(profileNames[:], "Profile", p) }

// ParseProfile parses the String form of a Profile.
func ParseProfile(s string) (Profile, error) {
	return parseEnum[Profile](profileNames[:], "profile", s)
}

// Authority says who holds dispatch authority over a node's actors.
// A Tempest node is always Sovereign: dispatch never leaves the node.
type Authority uint8

// Authorities. Federated and Replicated exist for fidelity with the
// contract and are never claimed by a Tempest node.
const (
	Sovereign Authority = iota
	Federated
	Replicated
)

var authorityNames = [...]string{"Sovereign", "Federated", "Replicated"}

func (a Authority) String() string { return enumString(authorityNames[:], "Authority", a) }

// ParseAuthority parses the String form of an Authority.
func ParseAuthority(s string) (Authority, error) {
	return parseEnum[Authority](authorityNames[:], "authority", s)
}

// ClauseID names one of the four dispatch clauses of the scheduler
// contract.
type ClauseID uint8

// The clauses, in their canonical order.
const (
	// Fairness: a ready actor is dispatched within finitely many events.
	Fairness ClauseID = iota
	// TurnDiscipline: turns run to completion; budget exhaustion is a fault.
	TurnDiscipline
	// ControlPlaneImmunity: supervision stays executable at saturation.
	ControlPlaneImmunity
	// Admission: a send is accepted or refused, and refusal is observable.
	Admission
)

// Clauses lists every clause in canonical order.
var Clauses = []ClauseID{Fairness, TurnDiscipline, ControlPlaneImmunity, Admission}

var clauseNames = [...]string{"Fairness", "TurnDiscipline", "ControlPlaneImmunity", "Admission"}

func (c ClauseID) String() string { return enumString(clauseNames[:], "Clause", c) }

// ParseClause parses the String form of a ClauseID.
func ParseClause(s string) (ClauseID, error) { return parseEnum[ClauseID](clauseNames[:], "clause", s) }

// enumString names v from names, or "Type(n)" for an undeclared value.
func enumString[T ~uint8](names []string, typ string, v T) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// parseEnum is the inverse of enumString for declared values.
func parseEnum[T ~uint8](names []string, what, s string) (T, error) {
	if i := slices.Index(names, s); i >= 0 {
		return T(i), nil
	}
	return 0, fmt.Errorf("manifest: unknown %s %q", what, s)
}

// Discharge says who guarantees a clause: the implementation itself
// (Substrate empty) or the named substrate.
type Discharge struct {
	// Substrate is empty when the clause is Discharged by the node
	// itself, and otherwise names what it is Assumed from.
	Substrate string
}

// Discharged is the Discharge of a clause the node guarantees itself.
var Discharged = Discharge{}

// Assumed returns the Discharge of a clause guaranteed by substrate.
func Assumed(substrate string) Discharge { return Discharge{Substrate: substrate} }

// IsDischarged reports whether the node guarantees the clause itself.
func (d Discharge) IsDischarged() bool { return d.Substrate == "" }

func (d Discharge) String() string {
	if d.IsDischarged() {
		return "Discharged"
	}
	return fmt.Sprintf("Assumed(%s)", d.Substrate)
}

// Capacities are the numbers the node actually enforces.
type Capacities struct {
	Workers          int           // scheduler worker goroutines
	MailboxDepth     int           // default mailbox capacity per actor
	TurnBudget       time.Duration // a longer turn is BudgetExhausted
	FairnessMessages int           // messages per drain cycle before yielding
	FairnessTime     time.Duration // time per drain cycle before yielding
	HydrationBudget  int           // concurrent hydrations (0: not enforced yet)
	MaxActive        int           // active actors before LRU passivation (0: unbounded)
	InboundBytes     int64         // bytes of inbound remote mail held (0: not enforced yet)
	// CPUQuota is the CPU limit observed from the container's cgroup, in
	// cores (0: none found). Recorded, not enforced.
	CPUQuota float64
	// ReplacementWorkers caps the workers the scheduler starts beside
	// turns abandoned past their budget that have not returned; past it
	// the pool runs below Workers and the node reports itself degraded.
	ReplacementWorkers int
	// Kinds are the limits of each registered kind, sorted by name.
	Kinds []KindCapacities
}

// KindCapacities are the limits the node enforces for one kind.
type KindCapacities struct {
	Kind         string
	MailboxDepth int           // mailbox bound of each activation
	TurnBudget   time.Duration // a longer turn is abandoned (BudgetExhausted)
}

// Manifest is one node's assumption manifest.
type Manifest struct {
	Profile    Profile
	Authority  Authority
	Clauses    map[ClauseID]Discharge
	Capacities Capacities
}

// Clause returns the discharge of c; a clause missing from the map is
// reported as assumed from "unspecified".
func (m Manifest) Clause(c ClauseID) Discharge {
	if d, ok := m.Clauses[c]; ok {
		return d
	}
	return Assumed("unspecified")
}

// Satisfies reports whether every clause in required is Discharged by
// this node. Placement uses it to find nodes eligible for a kind.
func (m Manifest) Satisfies(required []ClauseID) bool {
	for _, c := range required {
		if !m.Clause(c).IsDischarged() {
			return false
		}
	}
	return true
}

// String renders the manifest as stable, human-readable text: one line
// per field, clauses in canonical order.
func (m Manifest) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "profile: %s\n", m.Profile)
	fmt.Fprintf(&b, "authority: %s\n", m.Authority)
	b.WriteString("clauses:\n")
	for _, c := range m.clauseOrder() {
		fmt.Fprintf(&b, "  %s: %s\n", c, m.Clause(c))
	}
	k := m.Capacities
	b.WriteString("capacities:\n")
	fmt.Fprintf(&b, "  workers: %d\n", k.Workers)
	fmt.Fprintf(&b, "  mailbox_depth: %d\n", k.MailboxDepth)
	fmt.Fprintf(&b, "  turn_budget: %s\n", k.TurnBudget)
	fmt.Fprintf(&b, "  fairness_messages: %d\n", k.FairnessMessages)
	fmt.Fprintf(&b, "  fairness_time: %s\n", k.FairnessTime)
	fmt.Fprintf(&b, "  hydration_budget: %d\n", k.HydrationBudget)
	fmt.Fprintf(&b, "  max_active: %d\n", k.MaxActive)
	fmt.Fprintf(&b, "  inbound_bytes: %d\n", k.InboundBytes)
	fmt.Fprintf(&b, "  cpu_quota: %g\n", k.CPUQuota)
	fmt.Fprintf(&b, "  replacement_workers: %d\n", k.ReplacementWorkers)
	if len(k.Kinds) > 0 {
		b.WriteString("  kinds:\n")
		for _, kc := range k.Kinds {
			fmt.Fprintf(&b, "    %s: mailbox_depth=%d turn_budget=%s\n", kc.Kind, kc.MailboxDepth, kc.TurnBudget)
		}
	}
	return b.String()
}

// clauseOrder returns the canonical clauses followed by any unknown
// ones present in the map, sorted.
func (m Manifest) clauseOrder() []ClauseID {
	order := slices.Clone(Clauses)
	var extra []ClauseID
	for c := range m.Clauses {
		if !slices.Contains(Clauses, c) {
			extra = append(extra, c)
		}
	}
	slices.Sort(extra)
	return append(order, extra...)
}

// jsonManifest is the stable JSON form.
type jsonManifest struct {
	Profile    string         `json:"profile"`
	Authority  string         `json:"authority"`
	Clauses    []jsonClause   `json:"clauses"`
	Capacities jsonCapacities `json:"capacities"`
	Digest     string         `json:"digest"`
}

type jsonClause struct {
	Clause    string `json:"clause"`
	Discharge string `json:"discharge"`           // "Discharged" or "Assumed"
	Substrate string `json:"substrate,omitempty"` // for Assumed
}

type jsonCapacities struct {
	Workers          int     `json:"workers"`
	MailboxDepth     int     `json:"mailbox_depth"`
	TurnBudget       string  `json:"turn_budget"`
	FairnessMessages int     `json:"fairness_messages"`
	FairnessTime     string  `json:"fairness_time"`
	HydrationBudget  int     `json:"hydration_budget"`
	MaxActive        int     `json:"max_active"`
	InboundBytes     int64   `json:"inbound_bytes"`
	CPUQuota         float64 `json:"cpu_quota"`
	// ReplacementWorkers and Kinds are omitted when zero, so manifests
	// written before they existed read back equal.
	ReplacementWorkers int                `json:"replacement_workers,omitempty"`
	Kinds              []jsonKindCapacity `json:"kinds,omitempty"`
}

type jsonKindCapacity struct {
	Kind         string `json:"kind"`
	MailboxDepth int    `json:"mailbox_depth"`
	TurnBudget   string `json:"turn_budget"`
}

// MarshalJSON renders the stable JSON form, including the digest.
func (m Manifest) MarshalJSON() ([]byte, error) {
	j := jsonManifest{
		Profile:   m.Profile.String(),
		Authority: m.Authority.String(),
		Clauses:   []jsonClause{},
		Digest:    m.Digest(),
	}
	for _, c := range m.clauseOrder() {
		d := m.Clause(c)
		jc := jsonClause{Clause: c.String(), Discharge: "Discharged"}
		if !d.IsDischarged() {
			jc.Discharge, jc.Substrate = "Assumed", d.Substrate
		}
		j.Clauses = append(j.Clauses, jc)
	}
	k := m.Capacities
	j.Capacities = jsonCapacities{
		Workers: k.Workers, MailboxDepth: k.MailboxDepth, TurnBudget: k.TurnBudget.String(),
		FairnessMessages: k.FairnessMessages, FairnessTime: k.FairnessTime.String(),
		HydrationBudget: k.HydrationBudget, MaxActive: k.MaxActive, InboundBytes: k.InboundBytes,
		CPUQuota: k.CPUQuota, ReplacementWorkers: k.ReplacementWorkers,
	}
	for _, kc := range k.Kinds {
		j.Capacities.Kinds = append(j.Capacities.Kinds, jsonKindCapacity{Kind: kc.Kind,
			MailboxDepth: kc.MailboxDepth, TurnBudget: kc.TurnBudget.String()})
	}
	return json.Marshal(j)
}

// UnmarshalJSON parses the form written by MarshalJSON. The digest field
// is ignored (it is recomputed).
func (m *Manifest) UnmarshalJSON(b []byte) error {
	var j jsonManifest
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	var out Manifest
	var err error
	if out.Profile, err = ParseProfile(j.Profile); err != nil {
		return err
	}
	if out.Authority, err = ParseAuthority(j.Authority); err != nil {
		return err
	}
	out.Clauses = make(map[ClauseID]Discharge, len(j.Clauses))
	for _, jc := range j.Clauses {
		c, err := ParseClause(jc.Clause)
		if err != nil {
			return err
		}
		switch jc.Discharge {
		case "Discharged":
			out.Clauses[c] = Discharged
		case "Assumed":
			if jc.Substrate == "" {
				return fmt.Errorf("manifest: clause %s assumed from an empty substrate", c)
			}
			out.Clauses[c] = Assumed(jc.Substrate)
		default:
			return fmt.Errorf("manifest: clause %s: unknown discharge %q", c, jc.Discharge)
		}
	}
	k := j.Capacities
	out.Capacities = Capacities{
		Workers: k.Workers, MailboxDepth: k.MailboxDepth,
		FairnessMessages: k.FairnessMessages, HydrationBudget: k.HydrationBudget,
		MaxActive: k.MaxActive, InboundBytes: k.InboundBytes, CPUQuota: k.CPUQuota,
		ReplacementWorkers: k.ReplacementWorkers,
	}
	if out.Capacities.TurnBudget, err = parseDur(k.TurnBudget); err != nil {
		return err
	}
	for _, kc := range k.Kinds {
		d, err := parseDur(kc.TurnBudget)
		if err != nil {
			return err
		}
		out.Capacities.Kinds = append(out.Capacities.Kinds, KindCapacities{Kind: kc.Kind, MailboxDepth: kc.MailboxDepth, TurnBudget: d})
	}
	if out.Capacities.FairnessTime, err = parseDur(k.FairnessTime); err != nil {
		return err
	}
	*m = out
	return nil
}

func parseDur(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("manifest: %w", err)
	}
	return d, nil
}
