package wire

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/wire/bare"
)

// Reserved message tags. User tags are 1..MaxUserTag; the tags above it
// belong to the mail layer.
const (
	// MaxUserTag is the largest tag Register accepts.
	MaxUserTag uint32 = 0xFFFF_FF00
	// tagDeadlock is the tag of *actor.DeadlockError, which every
	// registry carries, so errors.As finds the cycle on the asker's node.
	tagDeadlock uint32 = 0xFFFF_FF01
	// TagError marks a Reply whose body is an error (see RemoteError).
	TagError uint32 = 0xFFFF_FFFE
	// TagNil marks a Reply whose value is nil; the body is empty.
	TagNil uint32 = 0xFFFF_FFFF
)

// Registry errors.
var (
	// ErrUnregistered: a message's Go type has no tag, so it cannot leave
	// the node. Local sends never need one.
	ErrUnregistered = errors.New("wire: message type not registered")
	// ErrDuplicate: the tag or the type is registered already.
	ErrDuplicate = errors.New("wire: message tag or type already registered")
	// ErrReservedTag: the tag is 0 or above MaxUserTag.
	ErrReservedTag = errors.New("wire: reserved message tag")
	// ErrUnknownTag: a peer sent a tag this node has no codec for. It
	// matches actor.ErrUnknownKind, which is what the asker sees.
	ErrUnknownTag error = &kindError{"wire: unknown message tag", actor.ErrUnknownKind}
)

// BAREMessage is the method set baregen generates for a struct type T
// (on *T): what Register needs to carry T across the wire.
type BAREMessage[T any] interface {
	*T
	AppendBARE(dst []byte) ([]byte, error)
	DecodeBARE(d *bare.Decoder)
}

// Registry maps Go message types to numeric tags and codecs, and back.
// One registry serves a node; every node of a cluster must register the
// same tags for the same types (the assumption manifest is the place to
// check that).
//
// Registration is meant for start-up but is safe at any time: lookups
// read an immutable snapshot and never lock or allocate. All methods are
// safe for concurrent use.
type Registry struct {
	mu     sync.Mutex // serializes writers
	snap   atomic.Pointer[regSnapshot]
	bodies arena // storage of decoded data fields (see Register)
	// internal admits the mail layer's own tags (above MaxUserTag); set
	// only while NewRegistry registers them.
	internal bool
	// kinds are the kinds that declared their messages (DeclareKind):
	// kind → its tags. Replaced whole under mu, read without a lock.
	kinds atomic.Pointer[map[string]KindTags]
}

// KindTags is the set of message tags a kind declared (DeclareKind).
type KindTags map[uint32]struct{}

type regSnapshot struct {
	byType map[reflect.Type]*regEntry
	byTag  map[uint32]*regEntry
	// byWord is byType keyed by the interface type word, which hashes
	// cheaper than a reflect.Type; small indexes tags below smallTags
	// directly. Both are derived from the maps above.
	byWord map[unsafe.Pointer]*regEntry
	small  []*regEntry
	// errs are the application errors, in registration order.
	errs []codedError
}

// smallTags bounds the directly indexed tag table.
const smallTags = 1024

type regEntry struct {
	tag    uint32
	typ    reflect.Type
	words  [2]unsafe.Pointer // type words of T and *T (nil when absent)
	encode func(dst []byte, msg any) ([]byte, error)
	decode func(body []byte) (any, error)
	value  func(msg any) (any, error) // msg as delivered to a receiver (nil: msg itself)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	r := &Registry{}
	r.snap.Store(&regSnapshot{byType: map[reflect.Type]*regEntry{}, byTag: map[uint32]*regEntry{},
		byWord: map[unsafe.Pointer]*regEntry{}})
	r.internal = true
	err := r.add(tagDeadlock, reflect.TypeFor[actor.DeadlockError](), reflect.TypeFor[*actor.DeadlockError](),
		[2]unsafe.Pointer{typeWord[actor.DeadlockError](), typeWord[*actor.DeadlockError]()},
		func(dst []byte, msg any) ([]byte, error) {
			switch e := msg.(type) {
			case *actor.DeadlockError:
				return appendDeadlock(dst, e)
			case actor.DeadlockError:
				return appendDeadlock(dst, &e)
			}
			return dst, fmt.Errorf("%w: %T", ErrUnregistered, msg)
		},
		func(body []byte) (any, error) {
			e, err := decodeDeadlock(body)
			if err != nil {
				return nil, err
			}
			return *e, nil
		})
	r.internal = false
	if err != nil {
		panic(err) // a fresh registry has no tags: cannot happen
	}
	return r
}

// appendDeadlock encodes a DeadlockError's cycle as list<ActorID>.
func appendDeadlock(dst []byte, e *actor.DeadlockError) ([]byte, error) {
	if e == nil {
		return dst, fmt.Errorf("%w: nil *actor.DeadlockError", ErrUnregistered)
	}
	dst = bare.AppendUint(dst, uint64(len(e.Cycle)))
	for _, r := range e.Cycle {
		id := ActorIDOf(r)
		var err error
		if dst, err = id.AppendBARE(dst); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

func decodeDeadlock(body []byte) (*actor.DeadlockError, error) {
	var d bare.Decoder
	d.Reset(body, bare.Config{})
	n := d.Count(3)
	if n > actor.MaxCallChain+1 {
		return nil, fmt.Errorf("%w: a cycle of %d", bare.ErrLimit, n)
	}
	e := &actor.DeadlockError{Cycle: make([]actor.Ref, 0, n)}
	for range n {
		var id ActorID
		id.DecodeBARE(&d)
		if d.Err() != nil {
			break
		}
		r, err := RefOf(&id)
		if err != nil {
			return nil, err
		}
		e.Cycle = append(e.Cycle, r)
	}
	if err := d.Finish(); err != nil {
		return nil, err
	}
	return e, nil
}

// Register maps the generated BARE type T (and *T, which encodes the
// same) to tag. Received messages are delivered as T values. It returns
// ErrReservedTag or ErrDuplicate.
//
// Decoding a received T costs at most one allocation: a body of at most
// 512 bytes is copied into a shared 8 KiB block that the data fields of
// the decoded value alias (never overwritten: they are capped, so an
// append copies), and a T is carved from a shared 1 KiB block of Ts when
// it has no pointers, or when its only pointers are its own data and
// string fields and its body is one of those small ones (strings are
// still allocated each). A decoded value kept beyond its turn therefore
// keeps its block of Ts alive and, through its neighbours there, at most
// a few tens of KiB (their bodies' blocks and strings); copy the fields
// you keep for long.
//
//	err := wire.Register[Greeting](reg, 100)
func Register[T any, PT BAREMessage[T]](r *Registry, tag uint32) error {
	boxed := boxedStruct[T]()
	typ := typeWord[T]()
	values := newSlab[T]()
	return r.addEntry(tag, reflect.TypeFor[T](), reflect.TypeFor[*T](), [2]unsafe.Pointer{typ, typeWord[*T]()},
		func(dst []byte, msg any) ([]byte, error) {
			if p, ok := msg.(*T); ok {
				if p == nil {
					return dst, fmt.Errorf("%w: nil %T", ErrUnregistered, msg)
				}
				return PT(p).AppendBARE(dst)
			}
			if _, ok := msg.(T); !ok {
				return dst, fmt.Errorf("%w: %T", ErrUnregistered, msg)
			}
			if boxed {
				// Encode from the interface's own copy instead of copying
				// T to the heap to call its pointer method.
				return PT((*T)(efaceData(&msg))).AppendBARE(dst)
			}
			v := msg.(T)
			return PT(&v).AppendBARE(dst)
		},
		func(body []byte) (any, error) {
			// A pooled decoder: one on the stack would escape through the
			// generic method call and cost an allocation per message.
			d := decoders.Get().(*bare.Decoder)
			defer decoders.Put(d)
			small := len(body) <= maxArenaBody
			if small {
				// Data fields alias a copy of the body in a shared block
				// instead of costing an allocation each.
				d.Reset(r.bodies.copy(body), bare.Config{ZeroCopy: true})
			} else {
				d.Reset(body, bare.Config{})
			}
			p := values.alloc(small)
			PT(p).DecodeBARE(d)
			if err := d.Finish(); err != nil {
				return nil, err
			}
			if boxed {
				// Box p itself: an interface holding T points at a heap
				// copy of T, and p is one (saves the second allocation).
				return boxAt(typ, unsafe.Pointer(p)), nil
			}
			return *p, nil
		},
		func(msg any) (any, error) {
			if p, ok := msg.(*T); ok {
				if p == nil {
					return nil, fmt.Errorf("%w: nil %T", ErrUnregistered, msg)
				}
				return *p, nil
			}
			return msg, nil
		})
}

var decoders = sync.Pool{New: func() any { return new(bare.Decoder) }}

// eface is the layout of an empty interface: type word, data word.
type eface struct {
	typ  unsafe.Pointer
	data unsafe.Pointer
}

// boxedStruct reports whether an interface holding a T keeps a pointer to
// a copy of T in its data word. That holds for structs larger than a
// pointer; smaller ones may be stored in the data word itself, and for
// those the generic code copies instead.
func boxedStruct[T any]() bool {
	t := reflect.TypeFor[T]()
	return t.Kind() == reflect.Struct && t.Size() > unsafe.Sizeof(uintptr(0))
}

// efaceData returns the data word of *e.
func efaceData(e *any) unsafe.Pointer { return (*eface)(unsafe.Pointer(e)).data }

// typeWord returns the type word of an interface holding a T.
func typeWord[T any]() unsafe.Pointer {
	var z any = *new(T)
	return (*eface)(unsafe.Pointer(&z)).typ
}

// boxAt returns an interface of type word typ whose data word is p,
// without copying *p. Only for boxedStruct types; *p must not be written
// afterwards.
func boxAt(typ, p unsafe.Pointer) any {
	e := eface{typ: typ, data: p}
	return *(*any)(unsafe.Pointer(&e))
}

// RegisterCodec maps T to tag with a hand-written codec: enc appends v's
// encoding to dst, dec decodes a whole body (which it must not keep: the
// bytes are reused after it returns). Received messages are delivered as
// T values.
//
//	err := wire.RegisterCodec(reg, 7,
//		func(dst []byte, s string) ([]byte, error) { return append(dst, s...), nil },
//		func(b []byte) (string, error) { return string(b), nil })
func RegisterCodec[T any](r *Registry, tag uint32, enc func(dst []byte, v T) ([]byte, error), dec func(body []byte) (T, error)) error {
	if enc == nil || dec == nil {
		return errors.New("wire: RegisterCodec needs both functions")
	}
	var words [2]unsafe.Pointer
	if reflect.TypeFor[T]().Kind() != reflect.Interface {
		words[0] = typeWord[T]()
	}
	return r.add(tag, reflect.TypeFor[T](), nil, words,
		func(dst []byte, msg any) ([]byte, error) {
			v, ok := msg.(T)
			if !ok {
				return dst, fmt.Errorf("%w: %T", ErrUnregistered, msg)
			}
			return enc(dst, v)
		},
		func(body []byte) (any, error) {
			v, err := dec(body)
			if err != nil {
				return nil, err
			}
			return v, nil
		})
}

func (r *Registry) add(tag uint32, typ, ptr reflect.Type, words [2]unsafe.Pointer, enc func([]byte, any) ([]byte, error), dec func([]byte) (any, error)) error {
	return r.addEntry(tag, typ, ptr, words, enc, dec, nil)
}

func (r *Registry) addEntry(tag uint32, typ, ptr reflect.Type, words [2]unsafe.Pointer, enc func([]byte, any) ([]byte, error), dec func([]byte) (any, error), value func(any) (any, error)) error {
	if tag == 0 || (tag > MaxUserTag && !r.internal) {
		return fmt.Errorf("%w: %d", ErrReservedTag, tag)
	}
	if typ.Kind() == reflect.Interface {
		return fmt.Errorf("wire: cannot register interface type %v", typ)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.snap.Load()
	if e, ok := old.byTag[tag]; ok {
		return fmt.Errorf("%w: tag %d is %v", ErrDuplicate, tag, e.typ)
	}
	for _, t := range []reflect.Type{typ, ptr} {
		if t == nil {
			continue
		}
		if e, ok := old.byType[t]; ok {
			return fmt.Errorf("%w: %v has tag %d", ErrDuplicate, t, e.tag)
		}
	}
	next := &regSnapshot{
		byType: make(map[reflect.Type]*regEntry, len(old.byType)+2),
		byTag:  make(map[uint32]*regEntry, len(old.byTag)+1),
		byWord: make(map[unsafe.Pointer]*regEntry, len(old.byWord)+2),
	}
	for k, v := range old.byType {
		next.byType[k] = v
	}
	for k, v := range old.byTag {
		next.byTag[k] = v
	}
	for k, v := range old.byWord {
		next.byWord[k] = v
	}
	e := &regEntry{tag: tag, typ: typ, words: words, encode: enc, decode: dec, value: value}
	next.byType[typ] = e
	if ptr != nil {
		next.byType[ptr] = e
	}
	for _, w := range words {
		if w != nil {
			next.byWord[w] = e
		}
	}
	next.byTag[tag] = e
	next.small = slices.Clone(old.small)
	next.errs = old.errs
	if tag < smallTags {
		if int(tag) >= len(next.small) {
			next.small = append(next.small, make([]*regEntry, int(tag)+1-len(next.small))...)
		}
		next.small[tag] = e
	}
	r.snap.Store(next)
	return nil
}

// Value returns msg in the form a receiver on another node gets it: a
// *T of a type registered with Register as the T it points to (a copy),
// anything else of a registered type unchanged. A type without a tag (or
// a nil *T) returns ErrUnregistered. Delivering local mail in this form
// too means a handler sees the same Go type from every sender.
func (r *Registry) Value(msg any) (any, error) {
	e := r.lookup(msg)
	switch {
	case e == nil:
		return nil, fmt.Errorf("%w: %T", ErrUnregistered, msg)
	case e.value == nil:
		return msg, nil
	}
	return e.value(msg)
}

// ValueTag is Value with the tag of msg's type.
func (r *Registry) ValueTag(msg any) (any, uint32, error) {
	e := r.lookup(msg)
	switch {
	case e == nil:
		return nil, 0, fmt.Errorf("%w: %T", ErrUnregistered, msg)
	case e.value == nil:
		return msg, e.tag, nil
	}
	v, err := e.value(msg)
	return v, e.tag, err
}

// DeclareKind restricts the messages an actor of kind may be sent to
// those of tags: a message of another registered type is refused by the
// mailer with KindTags.Check's error, the one the sender's node gives
// when it hosts the kind. A kind never declared takes any registered
// message.
func (r *Registry) DeclareKind(kind string, tags []uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := map[string]KindTags{}
	if old := r.kinds.Load(); old != nil {
		maps.Copy(next, *old)
	}
	set := make(KindTags, len(tags))
	for _, t := range tags {
		set[t] = struct{}{}
	}
	next[kind] = set
	r.kinds.Store(&next)
}

// KindOf returns the tags kind declared, nil when it declared none.
func (r *Registry) KindOf(kind string) KindTags {
	ks := r.kinds.Load()
	if ks == nil {
		return nil
	}
	return (*ks)[kind]
}

// Check returns nil when a message of tag (msg, for the error's text)
// may be sent to an actor of kind, whose declared tags ks are (nil: any
// message), else an error wrapping ErrUnregistered that names msg's type
// and the kind.
func (ks KindTags) Check(kind string, tag uint32, msg any) error {
	if ks == nil {
		return nil
	}
	if _, ok := ks[tag]; ok {
		return nil
	}
	return fmt.Errorf("%w: %T is not a message of kind %q (its KindOptions.Messages)", ErrUnregistered, msg, kind)
}

// Tag returns the tag of msg's type.
func (r *Registry) Tag(msg any) (uint32, bool) {
	e := r.lookup(msg)
	if e == nil {
		return 0, false
	}
	return e.tag, true
}

// lookup returns the entry of msg's dynamic type, nil if it has none.
// It keys on the interface's type word: no reflect.Type is built.
func (r *Registry) lookup(msg any) *regEntry {
	w := (*eface)(unsafe.Pointer(&msg)).typ
	if w == nil {
		return nil
	}
	return r.snap.Load().byWord[w]
}

// entry returns the entry of tag, nil if it has none.
func (s *regSnapshot) entry(tag uint32) *regEntry {
	if tag < uint32(len(s.small)) {
		return s.small[tag]
	}
	return s.byTag[tag]
}

// Append appends msg's encoding to dst and returns its tag. A nil msg
// encodes as TagNil with an empty body. It returns ErrUnregistered for a
// type without a tag, or the codec's error.
func (r *Registry) Append(dst []byte, msg any) (tag uint32, out []byte, err error) {
	if msg == nil {
		return TagNil, dst, nil
	}
	e := r.lookup(msg)
	if e == nil {
		return 0, dst, fmt.Errorf("%w: %T", ErrUnregistered, msg)
	}
	out, err = e.encode(dst, msg)
	return e.tag, out, err
}

// Decode decodes a body of tag into a new message. The message never
// aliases body. TagNil decodes as nil, TagError as the error value (see
// Registry.DecodeError). An unknown tag returns ErrUnknownTag.
func (r *Registry) Decode(tag uint32, body []byte) (any, error) {
	switch tag {
	case TagNil:
		if len(body) != 0 {
			return nil, errors.New("wire: nil message with a body")
		}
		return nil, nil
	case TagError:
		return r.DecodeError(body)
	}
	e := r.snap.Load().entry(tag)
	if e == nil {
		return nil, fmt.Errorf("%w: %d", ErrUnknownTag, tag)
	}
	return e.decode(body)
}

// ErrorCode classifies an error that crosses the wire, so errors.Is on
// the receiving side finds the same actor sentinel.
type ErrorCode uint8

// Error codes. Append new codes; never renumber.
const (
	CodeOther ErrorCode = iota
	CodeRefused
	CodeDeadlineExceeded
	CodeActorTerminated
	CodeProcessUnavailable
	CodeUnknownKind
	CodeNoEligibleNode
	CodeNotCommitted
	CodeNoReply
	CodeDeadlock
	CodeCallChainTooLong
	// CodeContextDeadline and CodeContextCanceled carry the standard
	// library's context.DeadlineExceeded and context.Canceled, which a
	// handler may reply (a nested call's ctx.Err()): they keep their
	// identity across nodes like the actor sentinels. An error matching an
	// actor sentinel as well keeps that sentinel's code (one code each).
	CodeContextDeadline
	CodeContextCanceled
	// CodePanicked is a turn that panicked; it wins over any code the
	// panic's own value matches (see CodeOf).
	CodePanicked
	codeCount
)

var codeSentinels = [codeCount]error{
	nil,
	actor.ErrRefused,
	actor.ErrDeadlineExceeded,
	actor.ErrActorTerminated,
	actor.ErrProcessUnavailable,
	actor.ErrUnknownKind,
	actor.ErrNoEligibleNode,
	actor.ErrNotCommitted,
	actor.ErrNoReply,
	actor.ErrDeadlock,
	actor.ErrCallChainTooLong,
	context.DeadlineExceeded,
	context.Canceled,
	actor.ErrPanicked,
}

// RemoteError is an error that an actor on another node answered an ask
// with (Context.ReplyError), or that the mail layer there produced. It
// keeps the error's identity as far as both registries agree on it:
//
//   - Code maps back to an actor sentinel, so errors.Is(err,
//     actor.ErrRefused) works across nodes;
//   - App is the application sentinel registered under AppCode with
//     RegisterError on this node, so errors.Is(err, ErrInsufficientFunds)
//     works across nodes;
//   - Value is the error value itself when its Go type is a registered
//     message type (a struct error with data, such as *OverdraftError),
//     decoded in the form it was sent (T or *T), so errors.As works
//     across nodes.
//
// An error matching none of these keeps only Code and Message; a
// clustered tempest.Node gives a local asker the same form (see
// tempest.KindOptions.Errors). Message is the text of the original error. When the error the actor
// replied was itself the registered sentinel or the registered value (not
// wrapped), the asker gets that sentinel or value, not a *RemoteError.
type RemoteError struct {
	Code    ErrorCode
	Message string
	// AppCode is the registered code of the application sentinel the
	// error matched on the replying node ("" when none).
	AppCode string
	// App is the sentinel registered under AppCode on this node (nil when
	// AppCode is empty or unknown here).
	App error
	// Value is the typed error carried in the registered codec of its Go
	// type (nil when none).
	Value error
}

func (e *RemoteError) Error() string { return e.Message }

// Unwrap returns the actor sentinel of Code, App and Value (those that
// are set), for errors.Is and errors.As.
func (e *RemoteError) Unwrap() []error {
	var out []error
	if e.Code > CodeOther && e.Code < codeCount {
		out = append(out, codeSentinels[e.Code])
	}
	if e.App != nil {
		out = append(out, e.App)
	}
	if e.Value != nil {
		out = append(out, e.Value)
	}
	return out
}

// CodeOf classifies err by the first actor sentinel it matches; a panic
// is a panic whatever its value matches.
func CodeOf(err error) ErrorCode {
	if errors.Is(err, actor.ErrPanicked) {
		return CodePanicked
	}
	var re *RemoteError
	if errors.As(err, &re) && re.Code < codeCount {
		return re.Code
	}
	for c := CodeRefused; c < codeCount; c++ {
		if errors.Is(err, codeSentinels[c]) {
			return c
		}
	}
	return CodeOther
}

// IsBuiltinError reports whether err is one of the sentinels the wire
// carries by a code of its own (actor.ErrRefused, actor.ErrNotCommitted,
// context.Canceled, ...): those keep their identity across nodes without
// registration, and cannot be registered (RegisterError).
func IsBuiltinError(err error) bool {
	for _, s := range codeSentinels[CodeRefused:] {
		if err == s {
			return true
		}
	}
	return false
}

// ErrBadErrorCode: RegisterError was given an empty code, a nil error, or
// a code or error registered already with a different partner.
var ErrBadErrorCode = errors.New("wire: bad error registration")

// RegisterError gives the application sentinel err the code code, so that
// an error reply matching it (errors.Is) crosses the wire as that code and
// matches the sentinel registered under the same code on the asker's
// node. Every node of a cluster must register the same codes for the same
// sentinels. Registering the same pair twice is allowed (several kinds may
// share an error); a code or an error already paired otherwise returns
// ErrBadErrorCode.
//
//	var ErrInsufficientFunds = errors.New("bank: insufficient funds")
//	err := reg.RegisterError("bank.insufficient_funds", ErrInsufficientFunds)
func (r *Registry) RegisterError(code string, err error) error {
	if code == "" || err == nil || !utf8.ValidString(code) {
		return fmt.Errorf("%w: code %q for %v", ErrBadErrorCode, code, err)
	}
	if !reflect.TypeOf(err).Comparable() {
		return fmt.Errorf("%w: %T is not comparable, so it cannot be a sentinel", ErrBadErrorCode, err)
	}
	if IsBuiltinError(err) {
		return fmt.Errorf("%w: %v crosses under a code of its own", ErrBadErrorCode, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.snap.Load()
	for _, e := range old.errs {
		switch {
		case e.code == code && e.err == err:
			return nil
		case e.code == code:
			return fmt.Errorf("%w: code %q is %v already", ErrBadErrorCode, code, e.err)
		case e.err == err:
			return fmt.Errorf("%w: %v has code %q already", ErrBadErrorCode, err, e.code)
		}
	}
	next := *old
	next.errs = append(slices.Clip(old.errs), codedError{code: code, err: err})
	r.snap.Store(&next)
	return nil
}

// ErrorFor returns the sentinel registered under code.
func (r *Registry) ErrorFor(code string) (error, bool) {
	for _, e := range r.snap.Load().errs {
		if e.code == code {
			return e.err, true
		}
	}
	return nil, false
}

type codedError struct {
	code string
	err  error
}

// Flags of the error body's extension.
const (
	errFlagIsApp   = 1 << iota // the error was the registered sentinel itself
	errFlagIsValue             // the error was the typed value itself
	errFlagPointer             // the typed value was a *T (else a T)
)

// AppendError appends the wire form of err to dst (the body of a Reply
// tagged TagError) with only the actor sentinel's code and the message:
// what a registry without application errors can say.
func AppendError(dst []byte, err error) []byte { return (*Registry)(nil).AppendError(dst, err) }

// AppendError appends the wire form of err to dst: the body of a Reply
// tagged TagError. It is the code of the actor sentinel err matches, its
// message, and, when err matches an application sentinel registered with
// RegisterError or wraps a value of a registered message type, that
// sentinel's code and the value's tag and encoding.
func (r *Registry) AppendError(dst []byte, err error) []byte {
	msg := "<nil>"
	if err != nil {
		msg = strings.ToValidUTF8(err.Error(), "\uFFFD")
	}
	dst = bare.AppendUint(dst, uint64(CodeOf(err)))
	dst = bare.AppendString(dst, msg)
	if r == nil || err == nil {
		return dst
	}
	snap := r.snap.Load()
	var flags uint64
	appCode := ""
	for _, e := range snap.errs {
		if errors.Is(err, e.err) {
			appCode = e.code
			if err == e.err {
				flags |= errFlagIsApp
			}
			break
		}
	}
	var tag uint32
	var body []byte
	if v, top := r.typedError(err); v != nil {
		if t, out, eerr := r.Append(nil, v); eerr == nil {
			tag, body = t, out
			if top {
				flags |= errFlagIsValue
			}
			if reflect.TypeOf(v).Kind() == reflect.Pointer {
				flags |= errFlagPointer
			}
		}
	}
	if appCode == "" && tag == 0 {
		return dst
	}
	dst = bare.AppendString(dst, appCode)
	dst = bare.AppendUint(dst, flags)
	dst = bare.AppendU32(dst, tag)
	return bare.AppendData(dst, body)
}

// typedError returns the first error in err's tree whose Go type is
// registered, and whether it is err itself.
func (r *Registry) typedError(err error) (error, bool) {
	snap := r.snap.Load()
	if len(snap.byTag) == 0 {
		return nil, false
	}
	queue := []error{err}
	for i := 0; len(queue) > 0; i++ {
		e := queue[0]
		queue = queue[1:]
		if e == nil {
			continue
		}
		if _, remote := e.(*RemoteError); !remote && r.lookup(e) != nil {
			return e, i == 0 // not e == err: the type may not be comparable
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			queue = append(queue, u.Unwrap())
		case interface{ Unwrap() []error }:
			queue = append(queue, u.Unwrap()...)
		}
	}
	return nil, false
}

// DecodeError decodes a body written by AppendError into a *RemoteError
// without application errors, returned as the value (not as the error,
// which reports a bad body).
func DecodeError(body []byte) (any, error) { return (*Registry)(nil).DecodeError(body) }

// DecodeError decodes a body written by AppendError into the error the
// asker sees, returned as the value (not as the error, which reports a
// bad body): the registered sentinel or typed value itself when that is
// what was replied, else a *RemoteError.
func (r *Registry) DecodeError(body []byte) (any, error) {
	var d bare.Decoder
	d.Reset(body, bare.Config{})
	code := d.Uint()
	msg := d.Str()
	var appCode string
	var flags uint64
	var tag uint32
	var vbody []byte
	if d.Err() == nil && d.Offset() < len(body) {
		appCode = d.Str()
		flags = d.Uint()
		tag = d.U32()
		vbody = d.Data(nil)
	}
	if err := d.Finish(); err != nil {
		return nil, err
	}
	if code >= uint64(codeCount) {
		code = uint64(CodeOther) // a newer peer's code: keep the message
	}
	re := &RemoteError{Code: ErrorCode(code), Message: msg, AppCode: appCode}
	if r == nil {
		return re, nil
	}
	if appCode != "" {
		re.App, _ = r.ErrorFor(appCode)
	}
	if tag != 0 {
		if v, err := r.Decode(tag, vbody); err == nil {
			re.Value = errorForm(v, flags&errFlagPointer != 0)
		}
	}
	switch {
	case flags&errFlagIsApp != 0 && re.App != nil:
		return re.App, nil
	case flags&errFlagIsValue != 0 && re.Value != nil:
		return re.Value, nil
	}
	return re, nil
}

// errorForm returns the decoded message v (a T) as an error in the form it
// was sent: *T when pointer, else T; nil when that form is not an error.
func errorForm(v any, pointer bool) error {
	if pointer {
		rv := reflect.ValueOf(v)
		p := reflect.New(rv.Type())
		p.Elem().Set(rv)
		v = p.Interface()
	}
	e, _ := v.(error)
	return e
}

// Decoded-message storage. Received messages are decoded into memory
// carved from blocks that are never reused, so the garbage collector frees
// a block once no decoded message points into it. Bump allocation is one
// atomic add, safe for concurrent readers.
const (
	arenaBlockSize = 8 << 10
	maxArenaBody   = 512
	slabBlockBytes = 1 << 10
)

// arena hands out copies of small byte slices from shared blocks.
type arena struct{ cur atomic.Pointer[arenaBlock] }

type arenaBlock struct {
	buf []byte
	off atomic.Int64
}

// copy returns a copy of b (len(b) <= maxArenaBody), capped so that an
// append to it cannot reach its neighbours.
func (a *arena) copy(b []byte) []byte {
	n := int64(len(b))
	for {
		blk := a.cur.Load()
		if blk != nil {
			if end := blk.off.Add(n); end <= int64(len(blk.buf)) {
				p := blk.buf[end-n : end : end]
				copy(p, b)
				return p
			}
		}
		a.cur.CompareAndSwap(blk, &arenaBlock{buf: make([]byte, arenaBlockSize)})
	}
}

// slab hands out zeroed Ts from shared blocks of Ts.
type slab[T any] struct {
	cur atomic.Pointer[slabBlock[T]]
	per int
	// refs: T's pointers are its data and string fields; it shares
	// blocks only when decoded from a small body (alloc).
	refs bool
}

type slabBlock[T any] struct {
	items []T
	next  atomic.Int64
}

// newSlab returns the slab of T. A T without pointers shares blocks, and
// so does a struct whose only pointers are data and string fields: a kept
// value keeps its whole block alive, and through its neighbours what
// their fields point to, which for those fields decoded from small bodies
// is bounded by the block's count of Ts times maxArenaBody. Any other
// pointer (a list, a map, an optional, a nested struct with one) could
// reach much more, so such a T is allocated alone.
func newSlab[T any]() *slab[T] {
	s := &slab[T]{per: 1}
	t := reflect.TypeFor[T]()
	if sz := int(t.Size()); sz > 0 && sz < slabBlockBytes {
		switch {
		case !hasPointers(t):
			s.per = slabBlockBytes / sz
		case onlyFlatRefs(t):
			s.per, s.refs = slabBlockBytes/sz, true
		}
	}
	return s
}

// onlyFlatRefs reports whether t is a struct whose fields are pointer-free
// or of type []byte or string.
func onlyFlatRefs(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := range t.NumField() {
		f := t.Field(i).Type
		switch {
		case !hasPointers(f):
		case f.Kind() == reflect.String:
		case f.Kind() == reflect.Slice && f.Elem().Kind() == reflect.Uint8:
		default:
			return false
		}
	}
	return true
}

// hasPointers reports whether values of t hold pointers.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	case reflect.Pointer, reflect.UnsafePointer, reflect.Slice, reflect.String, reflect.Map,
		reflect.Chan, reflect.Func, reflect.Interface:
		return true
	}
	return false
}

// alloc returns a new zero T, from a shared block unless T has pointers
// (refs) and is not decoded from a small body.
func (s *slab[T]) alloc(small bool) *T {
	if s.per == 1 || (s.refs && !small) {
		return new(T)
	}
	for {
		blk := s.cur.Load()
		if blk != nil {
			if i := blk.next.Add(1); i <= int64(len(blk.items)) {
				return &blk.items[i-1]
			}
		}
		s.cur.CompareAndSwap(blk, &slabBlock[T]{items: make([]T, s.per)})
	}
}
