package resolve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

const (
	resolvConfPath = "/etc/resolv.conf"
	maxNameservers = 3 // as the C library
	udpPayload     = 1232
	// resolvConfRecheck is how often the nameservers are read again.
	resolvConfRecheck = 30 * time.Second
	// directShare is the part of the lookup's time the direct query may use,
	// leaving the rest to the system resolver fallback.
	directShare = 2
)

var errNoAnswer = errors.New("no answer")

// SystemLookup resolves host with the system resolver (net.DefaultResolver,
// both address families, the search list applied). It gives no TTL (0).
func SystemLookup(ctx context.Context, host string) ([]netip.Addr, time.Duration, error) {
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	return addrs, 0, err
}

// DNSLookup is the default [LookupFunc]. It asks the nameservers of
// /etc/resolv.conf (re-read at most every 30s), in order, for the A and AAAA
// records of host as an absolute name (no search list) over UDP, and returns
// their addresses with the lowest TTL of the answer (CNAMEs included; a TTL of 0
// counts as 1s). When that gives no address (no nameserver, an error, a
// truncated or empty answer, NXDOMAIN) it falls back to [SystemLookup], which
// applies the search list and gives no TTL. The direct queries use at most half
// of ctx's remaining time.
func DNSLookup(ctx context.Context, host string) ([]netip.Addr, time.Duration, error) {
	return defaultDNS.lookup(ctx, host)
}

var defaultDNS = &dnsClient{servers: (&resolvConf{path: resolvConfPath}).servers, fallback: SystemLookup}

// dnsClient queries servers directly, then falls back.
type dnsClient struct {
	servers  func() []netip.AddrPort
	fallback LookupFunc
}

func (d *dnsClient) lookup(ctx context.Context, host string) ([]netip.Addr, time.Duration, error) {
	if servers := d.servers(); len(servers) > 0 {
		qctx, cancel := ctx, context.CancelFunc(func() {})
		if deadline, ok := ctx.Deadline(); ok {
			qctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(deadline)/directShare))
		}
		addrs, ttl, err := queryServers(qctx, servers, host)
		cancel()
		if err == nil {
			return addrs, ttl, nil
		}
	}
	return d.fallback(ctx, host)
}

// queryServers asks each server in turn for host's A and AAAA records until one
// gives an address.
func queryServers(ctx context.Context, servers []netip.AddrPort, host string) ([]netip.Addr, time.Duration, error) {
	name, err := dnsmessage.NewName(host + ".")
	if err != nil {
		return nil, 0, err
	}
	lastErr := errNoAnswer
	for _, server := range servers {
		var all []netip.Addr
		var ttl time.Duration
		for _, typ := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
			addrs, t, err := query(ctx, server, name, typ)
			if err != nil {
				lastErr = err
				continue
			}
			if len(addrs) > 0 {
				all = append(all, addrs...)
				ttl = minTTL(ttl, t)
			}
		}
		if len(all) > 0 {
			return all, ttl, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, 0, lastErr
}

// minTTL is the lower of two TTLs where 0 means none yet.
func minTTL(a, b time.Duration) time.Duration {
	if a == 0 {
		return b
	}
	return min(a, b)
}

// query sends one question to server over UDP and parses the answer.
func query(ctx context.Context, server netip.AddrPort, name dnsmessage.Name, typ dnsmessage.Type) ([]netip.Addr, time.Duration, error) {
	id := uint16(rand.Uint32())
	q := dnsmessage.Question{Name: name, Type: typ, Class: dnsmessage.ClassINET}
	msg, err := buildQuery(id, q)
	if err != nil {
		return nil, 0, err
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "udp", server.String())
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = conn.Close() }()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(msg); err != nil {
		return nil, 0, err
	}
	buf := make([]byte, udpPayload)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, 0, err
		}
		addrs, ttl, err := parseAnswer(buf[:n], id, q)
		if errors.Is(err, errForeign) {
			continue // not our answer: keep reading until the deadline
		}
		return addrs, ttl, err
	}
}

func buildQuery(id uint16, q dnsmessage.Question) ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), dnsmessage.Header{ID: id, RecursionDesired: true})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAdditionals(); err != nil {
		return nil, err
	}
	var opt dnsmessage.ResourceHeader
	if err := opt.SetEDNS0(udpPayload, dnsmessage.RCodeSuccess, false); err != nil {
		return nil, err
	}
	if err := b.OPTResource(opt, dnsmessage.OPTResource{}); err != nil {
		return nil, err
	}
	return b.Finish()
}

var errForeign = errors.New("not the answer to the query")

// parseAnswer returns the addresses of q's type that the answer msg gives for
// q's name, following CNAMEs, and the lowest TTL of the records on that chain
// (at least 1s).
func parseAnswer(msg []byte, id uint16, q dnsmessage.Question) ([]netip.Addr, time.Duration, error) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || !h.Response || h.ID != id {
		return nil, 0, errForeign
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 || qs[0].Type != q.Type || qs[0].Class != q.Class ||
		!strings.EqualFold(qs[0].Name.String(), q.Name.String()) {
		return nil, 0, errForeign
	}
	switch {
	case h.Truncated:
		return nil, 0, errors.New("truncated answer")
	case h.RCode == dnsmessage.RCodeNameError:
		return nil, 0, fmt.Errorf("%s: %w (NXDOMAIN)", q.Name, errNoAnswer)
	case h.RCode != dnsmessage.RCodeSuccess:
		return nil, 0, fmt.Errorf("%s: rcode %s", q.Name, h.RCode)
	}
	answers, err := p.AllAnswers()
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", q.Name, err)
	}
	return chain(answers, q)
}

// chain follows q's name through the CNAMEs of answers (at most 16 hops) and
// collects the addresses of q's type on the way.
func chain(answers []dnsmessage.Resource, q dnsmessage.Question) ([]netip.Addr, time.Duration, error) {
	name := strings.ToLower(q.Name.String())
	var addrs []netip.Addr
	var ttl time.Duration
	for hop := 0; hop < 16; hop++ {
		next := ""
		for _, r := range answers {
			if r.Header.Class != dnsmessage.ClassINET || !strings.EqualFold(r.Header.Name.String(), name) {
				continue
			}
			recTTL := max(time.Duration(r.Header.TTL)*time.Second, time.Second)
			switch body := r.Body.(type) {
			case *dnsmessage.AResource:
				addrs, ttl = append(addrs, netip.AddrFrom4(body.A)), minTTL(ttl, recTTL)
			case *dnsmessage.AAAAResource:
				addrs, ttl = append(addrs, netip.AddrFrom16(body.AAAA)), minTTL(ttl, recTTL)
			case *dnsmessage.CNAMEResource:
				next, ttl = strings.ToLower(body.CNAME.String()), minTTL(ttl, recTTL)
			}
		}
		if len(addrs) > 0 || next == "" {
			break
		}
		name = next
	}
	if len(addrs) == 0 {
		return nil, 0, fmt.Errorf("%s: %w", q.Name, errNoAnswer)
	}
	return addrs, ttl, nil
}

// resolvConf reads the nameservers of a resolv.conf file, again when it
// changed and resolvConfRecheck has passed.
type resolvConf struct {
	path string

	mu      sync.Mutex // guards the fields below
	checked time.Time
	mtime   time.Time
	list    []netip.AddrPort
}

func (r *resolvConf) servers() []netip.AddrPort {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if !r.checked.IsZero() && now.Sub(r.checked) < resolvConfRecheck {
		return r.list
	}
	r.checked = now
	st, err := os.Stat(r.path)
	if err != nil {
		r.list, r.mtime = nil, time.Time{}
		return nil
	}
	if st.ModTime().Equal(r.mtime) && r.list != nil {
		return r.list
	}
	f, err := os.Open(r.path)
	if err != nil {
		r.list = nil
		return nil
	}
	defer func() { _ = f.Close() }()
	r.list, r.mtime = parseResolvConf(io.LimitReader(f, 64<<10)), st.ModTime()
	return r.list
}

// parseResolvConf returns the first maxNameservers nameserver addresses (port 53).
func parseResolvConf(rd io.Reader) []netip.AddrPort {
	var out []netip.AddrPort
	sc := bufio.NewScanner(rd)
	for sc.Scan() && len(out) < maxNameservers {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(f[1]); err == nil {
			out = append(out, netip.AddrPortFrom(a.Unmap(), 53))
		}
	}
	return out
}
