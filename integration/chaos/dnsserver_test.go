package main

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"
)

// The wrapper of the replicas with a resolv.conf of their own: a test binary re-executed by
// resolvConfCommand becomes the command it names (TestResolvConfCommand).
func init() { execWithResolvConfIfAsked() }

// dnsQuery builds a query for name of type typ and class class with id 7.
func dnsQuery(t *testing.T, name string, typ dnsmessage.Type, class dnsmessage.Class, questions int) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	require.NoError(t, b.StartQuestions())
	for range questions {
		require.NoError(t, b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: class}))
	}
	msg, err := b.Finish()
	require.NoError(t, err)
	return msg
}

// The server answers A questions for its names with their addresses and TTL,
// authoritatively; AAAA with no record; unknown names with NXDOMAIN; malformed queries with
// FORMERR or not at all.
func TestDNSServerAnswer(t *testing.T) {
	s := &dnsServer{ttl: 2 * time.Second, records: map[string][]netip.Addr{}, history: map[string][]dnsAnswer{}, queries: map[string]int{}}
	s.Set("worker-0.backends.chaos.test", netip.MustParseAddr("198.18.7.5"), netip.MustParseAddr("198.18.7.2"), netip.MustParseAddr("198.18.7.2"))
	response := dnsQuery(t, "worker-0.backends.chaos.test.", dnsmessage.TypeA, dnsmessage.ClassINET, 1)
	response[2] |= 0x80 // QR: a response, not a query
	tests := []struct {
		name    string
		msg     []byte
		noReply bool
		rcode   dnsmessage.RCode
		addrs   []string
	}{
		{name: "A of a known name", msg: dnsQuery(t, "worker-0.backends.chaos.test.", dnsmessage.TypeA, dnsmessage.ClassINET, 1), addrs: []string{"198.18.7.2", "198.18.7.5"}},
		{name: "any case", msg: dnsQuery(t, "Worker-0.BACKENDS.chaos.test.", dnsmessage.TypeA, dnsmessage.ClassINET, 1), addrs: []string{"198.18.7.2", "198.18.7.5"}},
		{name: "AAAA of a known name: no record", msg: dnsQuery(t, "worker-0.backends.chaos.test.", dnsmessage.TypeAAAA, dnsmessage.ClassINET, 1)},
		{name: "unknown name", msg: dnsQuery(t, "worker-9.backends.chaos.test.", dnsmessage.TypeA, dnsmessage.ClassINET, 1), rcode: dnsmessage.RCodeNameError},
		{name: "class CHAOS", msg: dnsQuery(t, "worker-0.backends.chaos.test.", dnsmessage.TypeA, dnsmessage.ClassCHAOS, 1), rcode: dnsmessage.RCodeRefused},
		{name: "two questions", msg: dnsQuery(t, "worker-0.backends.chaos.test.", dnsmessage.TypeA, dnsmessage.ClassINET, 2), rcode: dnsmessage.RCodeFormatError},
		{name: "no questions", msg: dnsQuery(t, "worker-0.backends.chaos.test.", dnsmessage.TypeA, dnsmessage.ClassINET, 0), rcode: dnsmessage.RCodeFormatError},
		{name: "a response", msg: response, noReply: true},
		{name: "garbage", msg: []byte{1, 2, 3}, noReply: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, ok := s.Answer(tt.msg)
			if tt.noReply {
				assert.False(t, ok)
				return
			}
			require.True(t, ok)
			var p dnsmessage.Parser
			h, err := p.Start(out)
			require.NoError(t, err)
			assert.True(t, h.Response)
			assert.Equal(t, uint16(7), h.ID)
			assert.Equal(t, tt.rcode, h.RCode)
			if tt.rcode == dnsmessage.RCodeFormatError {
				return
			}
			assert.True(t, h.Authoritative)
			require.NoError(t, p.SkipAllQuestions())
			answers, err := p.AllAnswers()
			require.NoError(t, err)
			var got []string
			for _, a := range answers {
				assert.Equal(t, uint32(2), a.Header.TTL)
				got = append(got, netip.AddrFrom4(a.Body.(*dnsmessage.AResource).A).String())
			}
			assert.Equal(t, tt.addrs, got)
		})
	}
	assert.Equal(t, 4, s.Queries("worker-0.backends.chaos.test"), "the questions of class IN and CHAOS for the known name")
}

// Set replaces a name's answer and keeps its history; no addresses removes the name.
func TestDNSServerSet(t *testing.T) {
	s := &dnsServer{records: map[string][]netip.Addr{}, history: map[string][]dnsAnswer{}, queries: map[string]int{}}
	a, b := netip.MustParseAddr("198.18.7.2"), netip.MustParseAddr("198.18.7.5")
	s.Set("w.chaos.test.", a)
	s.Set("W.chaos.test", b, a)
	got, ok := s.Lookup("w.chaos.test")
	assert.True(t, ok)
	assert.Equal(t, []string{"198.18.7.2", "198.18.7.5"}, got)
	s.Set("w.chaos.test")
	_, ok = s.Lookup("w.chaos.test")
	assert.False(t, ok)
	h := s.History("w.chaos.test")
	require.Len(t, h, 3)
	assert.Equal(t, []netip.Addr{a}, h[0].Addrs)
	assert.Equal(t, []netip.Addr{a, b}, h[1].Addrs)
	assert.Empty(t, h[2].Addrs)
}

// A resolver that is not the harness's (Go's own) reads the served answers and their
// changes over UDP.
func TestDNSServerServes(t *testing.T) {
	s, err := listenDNS("127.0.0.1:0", time.Second)
	require.NoError(t, err)
	defer s.Close()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.AddrPort().String())
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.Set("worker-1.backends.chaos.test", netip.MustParseAddr("198.18.7.3"))
	got, err := r.LookupNetIP(ctx, "ip4", "worker-1.backends.chaos.test.")
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("198.18.7.3")}, got)
	s.Set("worker-1.backends.chaos.test", netip.MustParseAddr("198.18.7.6"))
	got, err = r.LookupNetIP(ctx, "ip4", "worker-1.backends.chaos.test.")
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("198.18.7.6")}, got)
	_, err = r.LookupNetIP(ctx, "ip4", "nobody.backends.chaos.test.")
	var dnsErr *net.DNSError
	require.ErrorAs(t, err, &dnsErr)
	assert.True(t, dnsErr.IsNotFound)
}

// A command started by resolvConfCommand sees the harness's resolv.conf at
// /etc/resolv.conf; the machine's is untouched. It needs root (a mount namespace).
func TestResolvConfCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a mount namespace needs root")
	}
	cat, err := exec.LookPath("cat")
	require.NoError(t, err)
	before, err := os.ReadFile(systemResolvConf)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(path, []byte("nameserver 127.0.53.9\n"), 0o644))
	cmd, err := resolvConfCommand(cat, path, []string{systemResolvConf}, nil)
	require.NoError(t, err)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "nameserver 127.0.53.9\n", string(out))
	after, err := os.ReadFile(systemResolvConf)
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after))
	assert.False(t, strings.Contains(string(after), "127.0.53.9"))
}
