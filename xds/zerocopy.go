package xds

import (
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// A large response's resources are encodings the cache shares between every response that
// carries them (encoder.encoded). Marshalling such a response whole copied each of them
// into one buffer per response and stream: a cold start of 10,000 maps held 209 MB of such
// copies at once (one per Envoy stream in flight, the whole cluster list and route
// configuration each), most of the publisher's heap, and spent a quarter of its CPU
// copying. marshalShared writes the response's own fields and each resource's framing into
// small buffers and references each shared encoding of at least refMin bytes in place:
// grpc-go's transport reads a mem.BufferSlice buffer by buffer into its frames, and the
// encodings are never modified once made. The bytes are those proto.Marshal gives: fields
// in number order (1, then the resources, 2, then the rest, marshalled by proto).

// refMin is the smallest encoding referenced in place; smaller ones are copied into the
// framing buffer (a reference costs a buffer header of its own).
const refMin = 128

// sharedWriter assembles a mem.BufferSlice from framing bytes written into one growing
// buffer and encodings referenced in place.
type sharedWriter struct {
	out   mem.BufferSlice
	buf   []byte
	start int // where buf's bytes not yet in out begin
}

// bytes writes b: copied when short, else referenced in place.
func (w *sharedWriter) bytes(b []byte) {
	if len(b) < refMin {
		w.buf = append(w.buf, b...)
		return
	}
	w.flush()
	w.out = append(w.out, mem.SliceBuffer(b))
}

// flush moves buf's pending bytes to out. Earlier parts of buf stay valid when append
// later moves it: they keep the array they were written into.
func (w *sharedWriter) flush() {
	if len(w.buf) > w.start {
		w.out = append(w.out, mem.SliceBuffer(w.buf[w.start:len(w.buf):len(w.buf)]))
		w.start = len(w.buf)
	}
}

// anySize is the encoded size of a, as proto.Size gives it.
func anySize(a *anypb.Any) int {
	n := 0
	if tu := a.GetTypeUrl(); tu != "" {
		n += protowire.SizeTag(1) + protowire.SizeBytes(len(tu))
	}
	if v := a.GetValue(); len(v) > 0 {
		n += protowire.SizeTag(2) + protowire.SizeBytes(len(v))
	}
	return n
}

// writeAny writes a as field num of its parent.
func (w *sharedWriter) writeAny(num protowire.Number, a *anypb.Any) {
	w.buf = appendAnyHead(w.buf, num, a)
	if v := a.GetValue(); len(v) > 0 {
		w.bytes(v)
	}
}

// appendAnyHead appends the encoding of a as field num of its parent up to its value's
// bytes: the field's tag and length, the type URL, the value's tag and length.
func appendAnyHead(b []byte, num protowire.Number, a *anypb.Any) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(anySize(a)))
	if tu := a.GetTypeUrl(); tu != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, tu)
	}
	if v := a.GetValue(); len(v) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(len(v)))
	}
	return b
}

// writeString writes s as field num (nothing when empty, as proto3 does).
func (w *sharedWriter) writeString(num protowire.Number, s string) {
	if s != "" {
		w.buf = protowire.AppendTag(w.buf, num, protowire.BytesType)
		w.buf = protowire.AppendString(w.buf, s)
	}
}

// rest marshals m's fields numbered above 2 and its unknown fields: a new message of m's
// type that shares their values (no copy of m's own fields 1 and 2).
func rest(m proto.Message) ([]byte, error) {
	src := m.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Number() > 2 {
			dst.Set(fd, v)
		}
		return true
	})
	dst.SetUnknown(src.GetUnknown())
	return proto.Marshal(dst.Interface())
}

// plainAny: a carries only a type URL and a value (no unknown fields), so anySize and
// writeAny encode it exactly.
func plainAny(a *anypb.Any) bool { return a != nil && len(a.ProtoReflect().GetUnknown()) == 0 }

// marshalShared marshals a state-of-the-world or delta response with its resources'
// encodings referenced in place; ok is false for any other message, or one whose resources
// it does not encode exactly (the caller then marshals it whole).
func marshalShared(v any) (mem.BufferSlice, bool, error) {
	switch m := v.(type) {
	case *discoveryv3.DiscoveryResponse:
		for _, a := range m.GetResources() {
			if !plainAny(a) {
				return nil, false, nil
			}
		}
		tail, err := rest(m)
		if err != nil {
			return nil, true, err
		}
		if b, ok := sharedBodies.get(m.GetResources()); ok {
			w := &sharedWriter{buf: make([]byte, 0, len(m.GetVersionInfo())+len(tail)+16)}
			w.writeString(1, m.GetVersionInfo())
			w.flush()
			w.out = append(w.out, mem.SliceBuffer(b))
			w.buf = append(w.buf, tail...)
			w.flush()
			return w.out, true, nil
		}
		w := &sharedWriter{buf: make([]byte, 0, 64*len(m.GetResources())+len(tail)+64)}
		w.writeString(1, m.GetVersionInfo())
		for _, a := range m.GetResources() {
			w.writeAny(2, a)
		}
		w.buf = append(w.buf, tail...)
		w.flush()
		return w.out, true, nil
	case *discoveryv3.DeltaDiscoveryResponse:
		return marshalDelta(m)
	}
	return nil, false, nil
}

// marshalDelta is marshalShared's delta response: each Resource as version (1), its
// encoding (2), then its other fields.
func marshalDelta(m *discoveryv3.DeltaDiscoveryResponse) (mem.BufferSlice, bool, error) {
	tails := make([][]byte, len(m.GetResources()))
	for i, r := range m.GetResources() {
		if r == nil || (r.GetResource() != nil && !plainAny(r.GetResource())) {
			return nil, false, nil
		}
		t, err := rest(r)
		if err != nil {
			return nil, true, err
		}
		tails[i] = t
	}
	tail, err := rest(m)
	if err != nil {
		return nil, true, err
	}
	w := &sharedWriter{buf: make([]byte, 0, 96*len(m.GetResources())+len(tail)+64)}
	w.writeString(1, m.GetSystemVersionInfo())
	for i, r := range m.GetResources() {
		n := len(tails[i])
		if ver := r.GetVersion(); ver != "" {
			n += protowire.SizeTag(1) + protowire.SizeBytes(len(ver))
		}
		if a := r.GetResource(); a != nil {
			n += protowire.SizeTag(2) + protowire.SizeBytes(anySize(a))
		}
		w.buf = protowire.AppendTag(w.buf, 2, protowire.BytesType)
		w.buf = protowire.AppendVarint(w.buf, uint64(n))
		w.writeString(1, r.GetVersion())
		if a := r.GetResource(); a != nil {
			w.writeAny(2, a)
		}
		w.buf = append(w.buf, tails[i]...)
	}
	w.buf = append(w.buf, tail...)
	w.flush()
	return w.out, true, nil
}
