package wire

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/wire/bare"
)

// Reserved message tags. User tags are 1..MaxUserTag; the tags above it
// belong to the mail layer.
const (
	// MaxUserTag is the largest tag Register accepts.
	MaxUserTag uint32 = 0xFFFF_FF00
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
}

type regSnapshot struct {
	byType map[reflect.Type]*regEntry
	byTag  map[uint32]*regEntry
	// byWord is byType keyed by the interface type word, which hashes
	// cheaper than a reflect.Type; small indexes tags below smallTags
	// directly. Both are derived from the maps above.
	byWord map[unsafe.Pointer]*regEntry
	small  []*regEntry
}

// smallTags bounds the directly indexed tag table.
const smallTags = 1024

type regEntry struct {
	tag    uint32
	typ    reflect.Type
	words  [2]unsafe.Pointer // type words of T and *T (nil when absent)
	encode func(dst []byte, msg any) ([]byte, error)
	decode func(body []byte) (any, error)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	r := &Registry{}
	r.snap.Store(&regSnapshot{byType: map[reflect.Type]*regEntry{}, byTag: map[uint32]*regEntry{},
		byWord: map[unsafe.Pointer]*regEntry{}})
	return r
}

// Register maps the generated BARE type T (and *T, which encodes the
// same) to tag. Received messages are delivered as T values. It returns
// ErrReservedTag or ErrDuplicate.
//
// Decoding a received T costs at most one allocation: a body of at most
// 512 bytes is copied into a shared 8 KiB block that the data fields of
// the decoded value alias (never overwritten: they are capped, so an
// append copies), and a T without pointers is carved from a shared 1 KiB
// block of Ts. A decoded value kept beyond its turn therefore keeps at
// most one block of each alive; copy the data fields you keep for long.
//
//	err := wire.Register[Greeting](reg, 100)
func Register[T any, PT BAREMessage[T]](r *Registry, tag uint32) error {
	boxed := boxedStruct[T]()
	typ := typeWord[T]()
	values := newSlab[T]()
	return r.add(tag, reflect.TypeFor[T](), reflect.TypeFor[*T](), [2]unsafe.Pointer{typ, typeWord[*T]()},
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
			if len(body) <= maxArenaBody {
				// Data fields alias a copy of the body in a shared block
				// instead of costing an allocation each.
				d.Reset(r.bodies.copy(body), bare.Config{ZeroCopy: true})
			} else {
				d.Reset(body, bare.Config{})
			}
			p := values.alloc()
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
	if tag == 0 || tag > MaxUserTag {
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
	e := &regEntry{tag: tag, typ: typ, words: words, encode: enc, decode: dec}
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
	if tag < smallTags {
		if int(tag) >= len(next.small) {
			next.small = append(next.small, make([]*regEntry, int(tag)+1-len(next.small))...)
		}
		next.small[tag] = e
	}
	r.snap.Store(next)
	return nil
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
// aliases body. TagNil decodes as nil, TagError as the error value (a
// *RemoteError). An unknown tag returns ErrUnknownTag.
func (r *Registry) Decode(tag uint32, body []byte) (any, error) {
	switch tag {
	case TagNil:
		if len(body) != 0 {
			return nil, errors.New("wire: nil message with a body")
		}
		return nil, nil
	case TagError:
		return DecodeError(body)
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
}

// RemoteError is an error that an actor on another node answered an ask
// with (Context.ReplyError), or that the mail layer there produced. Its
// Code maps back to an actor sentinel, so errors.Is(err,
// actor.ErrRefused) works across nodes; other errors keep only their
// message.
type RemoteError struct {
	Code    ErrorCode
	Message string
}

func (e *RemoteError) Error() string { return e.Message }

// Unwrap returns the actor sentinel of Code (nil for CodeOther).
func (e *RemoteError) Unwrap() error {
	if e.Code < codeCount {
		return codeSentinels[e.Code]
	}
	return nil
}

// CodeOf classifies err by the first actor sentinel it matches.
func CodeOf(err error) ErrorCode {
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

// AppendError appends the wire form of err (code, message) to dst: the
// body of a Reply tagged TagError.
func AppendError(dst []byte, err error) []byte {
	msg := "<nil>"
	if err != nil {
		msg = strings.ToValidUTF8(err.Error(), "\uFFFD")
	}
	dst = bare.AppendUint(dst, uint64(CodeOf(err)))
	return bare.AppendString(dst, msg)
}

// DecodeError decodes a body written by AppendError into a *RemoteError,
// returned as the value (not as the error, which reports a bad body).
func DecodeError(body []byte) (any, error) {
	var d bare.Decoder
	d.Reset(body, bare.Config{})
	code := d.Uint()
	msg := d.Str()
	if err := d.Finish(); err != nil {
		return nil, err
	}
	if code >= uint64(codeCount) {
		code = uint64(CodeOther) // a newer peer's code: keep the message
	}
	return &RemoteError{Code: ErrorCode(code), Message: msg}, nil
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
}

type slabBlock[T any] struct {
	items []T
	next  atomic.Int64
}

// newSlab returns the slab of T. Only a T without pointers shares
// blocks: a kept value of a type with pointers would keep its whole block
// alive, and through it the body blocks of all its neighbours.
func newSlab[T any]() *slab[T] {
	per := 1
	t := reflect.TypeFor[T]()
	if sz := int(t.Size()); sz > 0 && sz < slabBlockBytes && !hasPointers(t) {
		per = slabBlockBytes / sz
	}
	return &slab[T]{per: per}
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

// alloc returns a new zero T.
func (s *slab[T]) alloc() *T {
	if s.per == 1 {
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
