package xds

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// pooledMax is the largest message the server marshals with grpc-go's own codec, into its
// default buffer pool: 32 KiB. Requests, ACKs and most responses fit; a response carrying the
// Envoy flavour's whole route configuration (585 KB at 1,000 maps, 5.9 MB at 10,000) does not.
const pooledMax = 32 << 10

// keepLarge bounds the bytes of large buffers the codec keeps for reuse: enough for one
// drain's responses to 10 Envoys at 1,000 maps, two at 10,000.
const keepLarge = 16 << 20

// codec is the xDS server's gRPC codec: grpc-go's proto codec, except that a response
// larger than pooledMax is marshalled into a buffer from a pool that keeps at most
// keepLarge bytes, and nothing once no large response was marshalled for keepIdle. grpc-go's default pool keeps every large buffer given back (a 1 MiB tier,
// and a pool of any size above it) until two collections pass without a Get, so one drain's
// responses to every Envoy stayed in memory between drains: 60-75 MB of the publisher's
// 160-175 MB live heap at 1,000 maps (the fleet bench's heap profile); a buffer of its own
// per response instead cost the collector 9 ms of CPU per drain. Safe for concurrent use.
type codec struct {
	proto encoding.CodecV2
	large *largePool
}

// keepIdle is how long the codec keeps its large buffers after the last large response:
// they serve a storm of drains; between storms (a steady fleet) they are memory for nothing.
const keepIdle = 10 * time.Second

// largePool is a mem.BufferPool that keeps at most keepLarge bytes of buffers (first fit on
// Get; a buffer given back beyond the bound is left to the collector), and none once idle
// (no Get) for its idle time (keepIdle when zero). One lock.
type largePool struct {
	mu    sync.Mutex
	free  []*[]byte
	bytes int
	idle  time.Duration
	timer *time.Timer // releases the kept buffers after idle without a Get; nil until the first Get
}

// touched (re)starts the idle timer; called with p.mu held.
func (p *largePool) touched() {
	if p.timer != nil {
		p.timer.Reset(p.idleTime())
		return
	}
	p.timer = time.AfterFunc(p.idleTime(), p.release)
}

func (p *largePool) idleTime() time.Duration {
	if p.idle > 0 {
		return p.idle
	}
	return keepIdle
}

// release lets the collector have every kept buffer.
func (p *largePool) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free, p.bytes = nil, 0
}

// Get returns a buffer of length bytes, a kept one when one is large enough.
func (p *largePool) Get(length int) *[]byte {
	p.mu.Lock()
	p.touched()
	for i, b := range p.free {
		if cap(*b) >= length {
			p.free = slices.Delete(p.free, i, i+1)
			p.bytes -= cap(*b)
			p.mu.Unlock()
			*b = (*b)[:length]
			return b
		}
	}
	p.mu.Unlock()
	b := make([]byte, length)
	return &b
}

// Put keeps b for reuse while the kept bytes stay within keepLarge.
func (p *largePool) Put(b *[]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bytes+cap(*b) > keepLarge {
		return
	}
	p.free = append(p.free, b)
	p.bytes += cap(*b)
}

// newCodec returns the server's codec.
func newCodec() codec { return codec{proto: encoding.GetCodecV2(protoenc.Name), large: &largePool{}} }

// Name is the content subtype, "proto", as grpc-go's codec.
func (c codec) Name() string { return protoenc.Name }

// Unmarshal is grpc-go's.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

// Marshal is grpc-go's for a message up to pooledMax; a larger response references its
// resources' shared encodings in place (marshalShared), any other large message gets a
// buffer from c.large.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("xds codec: marshal %T: not a proto message", v)
	}
	size := proto.Size(m)
	if size <= pooledMax {
		return c.proto.Marshal(v)
	}
	if out, ok, err := marshalShared(v); ok {
		if err != nil {
			return nil, fmt.Errorf("xds codec: marshal %T: %w", v, err)
		}
		return out, nil
	}
	// UseCachedSize is safe: Size just computed it, and served messages are never modified.
	buf := c.large.Get(size)
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:0], m)
	if err != nil {
		c.large.Put(buf)
		return nil, fmt.Errorf("xds codec: marshal %T: %w", v, err)
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, c.large)}, nil
}
