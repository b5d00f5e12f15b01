package xds

import (
	"sync"
	"unsafe"
	"weak"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

// A wildcard state-of-the-world response carries a type's whole resource list, the one
// slice typeCache.encodedAll builds per update and hands to every wildcard stream. Written
// per response (marshalShared's framing plus one reference per resource), each such
// response cost about 140 bytes per resource per stream: at 10,000 maps (80,000 clusters)
// about 11 MB per Envoy per rebuild, five Envoys at once late in a cold start, the largest
// transient of the publisher's heap. sharedBodies encodes each registered list's resources
// field once, contiguously, and every response over that list references it: a response
// is its version, the body and its own tail, three buffers.
//
// Both the lists and their bodies are held weakly: a list is forgotten once its cache
// dropped it and no response carries it, a body once no response in flight references
// it (the next response over the list encodes it again). So the cache holds nothing at
// rest and never more than the responses in flight already hold.

// bodyMin is the smallest list registered: shorter lists frame cheaply per response.
const bodyMin = 256

// listKey identifies one resource list by its backing array and length: a list is never
// modified once built (typeCache.encodedAll).
type listKey struct {
	array weak.Pointer[*anypb.Any]
	n     int
}

// body is the weakly held encoding of a list's resources field: its first byte and length.
type body struct {
	first weak.Pointer[byte]
	n     int
}

// bodyCache holds the registered lists and their bodies; all its state is guarded by mu.
type bodyCache struct {
	mu     sync.Mutex
	bodies map[listKey]body
}

// sharedBodies is the process's one body cache: the codec (marshalShared) reads it for
// every stream, the type caches register their wildcard lists in it.
var sharedBodies = &bodyCache{bodies: map[listKey]body{}}

// listKeyOf is list's key: a weak pointer to its backing array, and its length.
func listKeyOf(list []*anypb.Any) listKey {
	return listKey{array: weak.Make(unsafe.SliceData(list)), n: len(list)}
}

// register marks list as shared between responses (its body worth encoding once), and
// forgets the lists collected since.
func (c *bodyCache) register(list []*anypb.Any) {
	if len(list) < bodyMin {
		return
	}
	k := listKeyOf(list)
	c.mu.Lock()
	defer c.mu.Unlock()
	for old := range c.bodies {
		if old.array.Value() == nil {
			delete(c.bodies, old)
		}
	}
	if _, ok := c.bodies[k]; !ok {
		c.bodies[k] = body{}
	}
}

// get returns the encoding of list as a response's resources field (field 2 once per
// resource), made once while any response holds it; ok is false for a list not
// registered. Every resource must be plainAny.
func (c *bodyCache) get(list []*anypb.Any) (b []byte, ok bool) {
	if len(list) < bodyMin {
		return nil, false
	}
	k := listKeyOf(list)
	c.mu.Lock()
	defer c.mu.Unlock()
	have, ok := c.bodies[k]
	if !ok {
		return nil, false
	}
	if p := have.first.Value(); p != nil {
		return unsafe.Slice(p, have.n), true
	}
	n := 0
	for _, a := range list {
		n += protowire.SizeTag(2) + protowire.SizeBytes(anySize(a))
	}
	b = make([]byte, 0, n)
	for _, a := range list {
		b = append(appendAnyHead(b, 2, a), a.GetValue()...)
	}
	c.bodies[k] = body{first: weak.Make(&b[0]), n: len(b)}
	return b, true
}
