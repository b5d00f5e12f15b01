package resolve

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"
)

// record is one answer record of the fake nameserver.
type record struct {
	name, cname string
	addr        string
	ttl         uint32
}

// zone is the fake nameserver's data: records by lowercase absolute name, and
// per-name behaviour.
type zone struct {
	records   []record
	nxdomain  map[string]bool
	truncate  map[string]bool
	foreignID bool // send an answer with a wrong ID first
}

// serveDNS runs a fake nameserver on a free loopback port until the test ends.
func serveDNS(t *testing.T, z zone) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			for _, out := range z.answer(t, buf[:n]) {
				_, _ = pc.WriteTo(out, from)
			}
		}
	})
	t.Cleanup(func() {
		_ = pc.Close()
		wg.Wait()
	})
	return netip.MustParseAddrPort(pc.LocalAddr().String())
}

func (z zone) answer(t *testing.T, msg []byte) [][]byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	require.NoError(t, err)
	q, err := p.Question()
	require.NoError(t, err)
	name := strings.ToLower(q.Name.String())
	rh := dnsmessage.Header{ID: h.ID, Response: true, RecursionAvailable: true, Truncated: z.truncate[name]}
	if z.nxdomain[name] {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	require.NoError(t, b.StartQuestions())
	require.NoError(t, b.Question(q))
	require.NoError(t, b.StartAnswers())
	for _, r := range z.records {
		hdr := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(r.name), Class: dnsmessage.ClassINET, TTL: r.ttl}
		switch a := netip.MustParseAddr(orZero(r.addr)); {
		case r.cname != "":
			require.NoError(t, b.CNAMEResource(hdr, dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName(r.cname)}))
		case a.Is4() && q.Type == dnsmessage.TypeA:
			require.NoError(t, b.AResource(hdr, dnsmessage.AResource{A: a.As4()}))
		case a.Is6() && q.Type == dnsmessage.TypeAAAA:
			require.NoError(t, b.AAAAResource(hdr, dnsmessage.AAAAResource{AAAA: a.As16()}))
		}
	}
	out, err := b.Finish()
	require.NoError(t, err)
	if !z.foreignID {
		return [][]byte{out}
	}
	foreign := append([]byte(nil), out...)
	foreign[0]++
	return [][]byte{foreign, out}
}

func orZero(s string) string {
	if s == "" {
		return "0.0.0.0"
	}
	return s
}

// fallback is a fake system resolver that records its calls.
type fallback struct {
	mu    sync.Mutex
	hosts []string
}

func (f *fallback) lookup(_ context.Context, host string) ([]netip.Addr, time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hosts = append(f.hosts, host)
	return addrs("192.0.2.99"), 0, nil
}

func TestDNSLookup(t *testing.T) {
	tests := []struct {
		name         string
		zone         zone
		host         string
		want         []netip.Addr
		ttl          time.Duration
		wantFallback bool
	}{
		{
			name: "A and AAAA with the lowest TTL",
			zone: zone{records: []record{
				{name: "api.example.com.", addr: "10.0.0.1", ttl: 60},
				{name: "api.example.com.", addr: "10.0.0.2", ttl: 30},
				{name: "api.example.com.", addr: "2001:db8::1", ttl: 45},
			}},
			host: "api.example.com",
			want: addrs("10.0.0.1", "10.0.0.2", "2001:db8::1"),
			ttl:  30 * time.Second,
		},
		{
			name: "CNAME chain, its TTL counts",
			zone: zone{records: []record{
				{name: "api.example.com.", cname: "lb.example.net.", ttl: 20},
				{name: "lb.example.net.", addr: "10.0.0.3", ttl: 300},
				{name: "other.example.org.", addr: "10.9.9.9", ttl: 1},
			}},
			host: "api.example.com",
			want: addrs("10.0.0.3"),
			ttl:  20 * time.Second,
		},
		{
			name: "TTL 0 counts as 1s",
			zone: zone{records: []record{{name: "api.example.com.", addr: "10.0.0.1", ttl: 0}}},
			host: "api.example.com",
			want: addrs("10.0.0.1"),
			ttl:  time.Second,
		},
		{
			name: "an answer with another ID is ignored",
			zone: zone{foreignID: true, records: []record{{name: "api.example.com.", addr: "10.0.0.1", ttl: 10}}},
			host: "api.example.com",
			want: addrs("10.0.0.1"),
			ttl:  10 * time.Second,
		},
		{
			name:         "NXDOMAIN falls back (search list)",
			zone:         zone{nxdomain: map[string]bool{"svc.": true}},
			host:         "svc",
			wantFallback: true,
		},
		{
			name:         "records for other names only fall back",
			zone:         zone{records: []record{{name: "other.example.com.", addr: "10.0.0.1", ttl: 10}}},
			host:         "api.example.com",
			wantFallback: true,
		},
		{
			name:         "truncated falls back",
			zone:         zone{truncate: map[string]bool{"api.example.com.": true}},
			host:         "api.example.com",
			wantFallback: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server := serveDNS(t, tt.zone)
			fb := &fallback{}
			d := &dnsClient{servers: func() []netip.AddrPort { return []netip.AddrPort{server} }, fallback: fb.lookup}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			got, ttl, err := d.lookup(ctx, tt.host)
			require.NoError(t, err)
			if tt.wantFallback {
				assert.Equal(t, []string{tt.host}, fb.hosts)
				assert.Equal(t, addrs("192.0.2.99"), got)
				assert.Zero(t, ttl)
				return
			}
			assert.Empty(t, fb.hosts)
			assert.Equal(t, tt.want, normalize(got))
			assert.Equal(t, tt.ttl, ttl)
		})
	}
}

func TestDNSLookupFallsBackWithoutServers(t *testing.T) {
	fb := &fallback{}
	d := &dnsClient{servers: func() []netip.AddrPort { return nil }, fallback: fb.lookup}
	got, ttl, err := d.lookup(t.Context(), "api.example.com")
	require.NoError(t, err)
	assert.Equal(t, addrs("192.0.2.99"), got)
	assert.Zero(t, ttl)
}

func TestDNSLookupUnreachableServerLeavesTimeForFallback(t *testing.T) {
	// A bound socket that never answers: the direct query times out after half
	// the lookup's time and the fallback still runs.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pc.Close() })
	server := netip.MustParseAddrPort(pc.LocalAddr().String())
	fb := &fallback{}
	d := &dnsClient{servers: func() []netip.AddrPort { return []netip.AddrPort{server} }, fallback: fb.lookup}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	got, _, err := d.lookup(ctx, "api.example.com")
	require.NoError(t, err)
	assert.Equal(t, addrs("192.0.2.99"), got)
	assert.Equal(t, []string{"api.example.com"}, fb.hosts)
}

func TestParseResolvConf(t *testing.T) {
	conf := `# comment
search ns.svc.cluster.local svc.cluster.local
nameserver 10.96.0.10
nameserver   2001:db8::53
nameserver not-an-ip
options ndots:5
nameserver 10.0.0.1
nameserver 10.0.0.2
`
	assert.Equal(t, []netip.AddrPort{
		netip.MustParseAddrPort("10.96.0.10:53"),
		netip.MustParseAddrPort("[2001:db8::53]:53"),
		netip.MustParseAddrPort("10.0.0.1:53"),
	}, parseResolvConf(strings.NewReader(conf)))
}

func TestParseAnswerRejectsForeign(t *testing.T) {
	q := dnsmessage.Question{Name: dnsmessage.MustNewName("api.example.com."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	msg, err := buildQuery(7, q) // a query, not a response
	require.NoError(t, err)
	_, _, err = parseAnswer(msg, 7, q)
	require.ErrorIs(t, err, errForeign)
	_, _, err = parseAnswer([]byte{1, 2, 3}, 7, q)
	require.True(t, errors.Is(err, errForeign))
}

func TestResolvConfRereads(t *testing.T) {
	path := t.TempDir() + "/resolv.conf"
	r := &resolvConf{path: path}
	assert.Empty(t, r.servers(), "a missing file has no nameservers")
	require.NoError(t, os.WriteFile(path, []byte("nameserver 10.96.0.10\n"), 0o600))
	assert.Empty(t, r.servers(), "read again only after the recheck period")
	r.checked = r.checked.Add(-resolvConfRecheck)
	assert.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("10.96.0.10:53")}, r.servers())
}
