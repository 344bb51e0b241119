package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"time"

	"github.com/tempest-actors/tempest/manifest/internal/form"
)

// MarshalBARE returns the manifest's BARE form (schema:
// manifest/internal/form/manifest.bare), with clauses in canonical order,
// so equal manifests have equal bytes.
func (m Manifest) MarshalBARE() ([]byte, error) {
	w := form.Manifest{
		Profile:   form.Profile(m.Profile),
		Authority: form.Authority(m.Authority),
	}
	for _, c := range m.clauseOrder() {
		w.Clauses = append(w.Clauses, form.ClauseEntry{Clause: form.ClauseID(c), Substrate: m.Clause(c).Substrate})
	}
	k := m.Capacities
	w.Capacities = form.Capacities{
		Workers:            nonNeg(k.Workers),
		MailboxDepth:       nonNeg(k.MailboxDepth),
		TurnBudgetNs:       int64(k.TurnBudget),
		FairnessMessages:   nonNeg(k.FairnessMessages),
		FairnessTimeNs:     int64(k.FairnessTime),
		HydrationBudget:    nonNeg(k.HydrationBudget),
		MaxActive:          nonNeg(k.MaxActive),
		InboundBytes:       k.InboundBytes,
		CpuQuota:           k.CPUQuota,
		ReplacementWorkers: nonNeg(k.ReplacementWorkers),
	}
	for _, kc := range k.Kinds {
		w.Capacities.Kinds = append(w.Capacities.Kinds, form.KindCapacities{Kind: kc.Kind,
			MailboxDepth: nonNeg(kc.MailboxDepth), TurnBudgetNs: int64(kc.TurnBudget)})
	}
	b, err := w.MarshalBARE()
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return b, nil
}

// UnmarshalBARE parses the BARE form strictly: unknown enum values,
// duplicate clauses and trailing bytes are errors.
func (m *Manifest) UnmarshalBARE(b []byte) error {
	var w form.Manifest
	if err := w.UnmarshalBARE(b); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	out := Manifest{
		Profile:   Profile(w.Profile),
		Authority: Authority(w.Authority),
		Clauses:   make(map[ClauseID]Discharge, len(w.Clauses)),
	}
	for _, e := range w.Clauses {
		c := ClauseID(e.Clause)
		if _, dup := out.Clauses[c]; dup {
			return fmt.Errorf("manifest: clause %s listed twice", c)
		}
		out.Clauses[c] = Discharge{Substrate: e.Substrate}
	}
	k := w.Capacities
	for _, v := range []uint64{k.Workers, k.MailboxDepth, k.FairnessMessages, k.HydrationBudget, k.MaxActive, k.ReplacementWorkers} {
		if v > math.MaxInt32 {
			return fmt.Errorf("manifest: capacity %d out of range", v)
		}
	}
	var kinds []KindCapacities
	for _, kc := range k.Kinds {
		if kc.MailboxDepth > math.MaxInt32 {
			return fmt.Errorf("manifest: mailbox depth %d of kind %q out of range", kc.MailboxDepth, kc.Kind)
		}
		kinds = append(kinds, KindCapacities{Kind: kc.Kind, MailboxDepth: int(kc.MailboxDepth), TurnBudget: time.Duration(kc.TurnBudgetNs)})
	}
	out.Capacities = Capacities{
		Workers:            int(k.Workers),
		MailboxDepth:       int(k.MailboxDepth),
		TurnBudget:         time.Duration(k.TurnBudgetNs),
		FairnessMessages:   int(k.FairnessMessages),
		FairnessTime:       time.Duration(k.FairnessTimeNs),
		HydrationBudget:    int(k.HydrationBudget),
		MaxActive:          int(k.MaxActive),
		InboundBytes:       k.InboundBytes,
		CPUQuota:           k.CpuQuota,
		ReplacementWorkers: int(k.ReplacementWorkers),
		Kinds:              kinds,
	}
	*m = out
	return nil
}

func nonNeg(n int) uint64 {
	if n < 0 {
		return 0
	}
	return uint64(n)
}

// Digest is a short stable hash (16 hex digits) of the manifest's BARE
// form; nodes gossip it so peers notice when a manifest changes.
func (m Manifest) Digest() string {
	b, err := m.MarshalBARE()
	if err != nil {
		// Only an out-of-range enum value can fail to encode; hash the
		// text form so the digest still differs from any valid one.
		b = []byte(m.String())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
