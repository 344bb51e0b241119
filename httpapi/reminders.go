package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/reminders"
)

// ReminderNode is the optional capability of a Node (tempest.Node has
// it) to list and cancel durable reminders, from any node of the cluster
// (the node asks the owner's supervisor over the federation protocol). A
// Node without it answers the reminder endpoints 501.
type ReminderNode interface {
	Reminders() *tempest.Reminders
}

// ReminderBody is one reminder of a RemindersBody.
type ReminderBody struct {
	Name string    `json:"name"`
	Due  time.Time `json:"due"` // the first occurrence
	// Period is a Go duration ("1h0m0s"), empty for a one-shot reminder.
	Period     string `json:"period,omitempty"`
	Catchup    string `json:"catchup"` // "fire-once", "skip" or "fire-up-to"
	MaxCatchup int    `json:"max_catchup,omitempty"`
	// Next is when the next tick is due; LastSeq the sequence number of
	// the last tick delivered (0: none yet); Outstanding whether a tick is
	// on its way to the actor now.
	Next        time.Time `json:"next"`
	LastSeq     uint64    `json:"last_seq"`
	Outstanding bool      `json:"outstanding"`
	// PayloadType is the message tag the payload is stored under, empty
	// for none.
	PayloadType string `json:"payload_type,omitempty"`
}

// RemindersBody is the answer of GET /v1/actors/{kind}/{key}/reminders:
// the reminders of one identity, by name, as its owner (Node) holds them.
type RemindersBody struct {
	Node      string         `json:"node"`
	Kind      string         `json:"kind"`
	Key       string         `json:"key"`
	Reminders []ReminderBody `json:"reminders"`
}

func toReminderBody(in reminders.Info) ReminderBody {
	b := ReminderBody{Name: in.Name, Due: in.Due.UTC(), Catchup: in.Catchup.String(), MaxCatchup: in.MaxCatchup,
		Next: in.Next.UTC(), LastSeq: in.LastSeq, Outstanding: in.Outstanding, PayloadType: in.PayloadType}
	if in.Period > 0 {
		b.Period = in.Period.String()
	}
	return b
}

// reminderRef checks the {kind}/{key} of r and returns the node's
// reminder service; false when it answered the request itself (bad key,
// no reminders on this node). The node says whether the kind exists: in
// a cluster it may be registered only on other nodes.
//
// Any node answers: one that does not own the identity asks the owner's
// supervisor over the authenticated control lane (the caller's token
// never leaves this node), so the answer and its errors are the owner's.
func (s *Server) reminderRef(w http.ResponseWriter, r *http.Request) (actor.Ref, *tempest.Reminders, bool) {
	ref := actor.Virtual(r.PathValue("kind"), r.PathValue("key"))
	if err := ref.Check(); err != nil {
		s.fail(w, err)
		return ref, nil, false
	}
	// A name no reminder can have (registration refuses it) is a bad
	// request, not "no such reminder".
	if name := r.PathValue("name"); name != "" && len(name) > reminders.MaxNameBytes {
		writeError(w, http.StatusBadRequest, codeBadRequest, fmt.Sprintf("reminder name over %d bytes", reminders.MaxNameBytes))
		return ref, nil, false
	} else if !utf8.ValidString(name) {
		writeError(w, http.StatusBadRequest, codeBadRequest, fmt.Sprintf("reminder name %q is not valid UTF-8", name))
		return ref, nil, false
	}
	rn, ok := s.node.(ReminderNode)
	if !ok {
		writeError(w, http.StatusNotImplemented, codeNotSupported, "this node keeps no reminders")
		return ref, nil, false
	}
	return ref, rn.Reminders(), true
}

// reminderList answers GET /v1/actors/{kind}/{key}/reminders.
func (s *Server) reminderList(w http.ResponseWriter, r *http.Request) {
	ref, rem, ok := s.reminderRef(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	list, err := rem.ListOf(ctx, ref)
	if err != nil {
		s.failReminder(w, err)
		return
	}
	out := RemindersBody{Node: list.Node, Kind: ref.Kind(), Key: ref.Key(), Reminders: []ReminderBody{}}
	for _, in := range list.Reminders {
		out.Reminders = append(out.Reminders, toReminderBody(in))
	}
	writeJSON(w, http.StatusOK, out)
}

// reminderGet answers GET /v1/actors/{kind}/{key}/reminders/{name}.
func (s *Server) reminderGet(w http.ResponseWriter, r *http.Request) {
	ref, rem, ok := s.reminderRef(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	list, err := rem.ListOf(ctx, ref)
	if err != nil {
		s.failReminder(w, err)
		return
	}
	name := r.PathValue("name")
	for _, in := range list.Reminders {
		if in.Name == name {
			writeJSON(w, http.StatusOK, toReminderBody(in))
			return
		}
	}
	s.failReminder(w, fmt.Errorf("%w: %s %q", reminders.ErrNotFound, ref, name))
}

// reminderCancel answers DELETE /v1/actors/{kind}/{key}/reminders/{name}:
// 204 once the cancellation is at rest; no tick of the reminder runs
// after that, also not one already on its way.
func (s *Server) reminderCancel(w http.ResponseWriter, r *http.Request) {
	ref, rem, ok := s.reminderRef(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := rem.Cancel(ctx, ref, r.PathValue("name")); err != nil {
		s.failReminder(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// failReminder answers an error of the reminder service: no such
// reminder is 404, a shard its owner does not hold (ownership moving,
// or not loaded yet) 503, anything else as every other error. classify
// answers these alike when an actor replied them to an ask.
func (s *Server) failReminder(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, reminders.ErrNotFound):
		writeError(w, http.StatusNotFound, codeNotFound, err.Error())
	case errors.Is(err, reminders.ErrNotOwner), errors.Is(err, reminders.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, err.Error())
	default:
		s.fail(w, err)
	}
}
