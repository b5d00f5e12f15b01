package model

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Who may claim which hostname. Everything in this file is pure.
//
// Two rules, checked before a map's hostname becomes a claim (a refused hostname is no
// claim: it holds nothing, withholds nothing and is served by no sink):
//
//  1. gRPC names belong to their namespace. A map's "<service>.<namespace>" name is the
//     name proxyless gRPC clients dial, and it shares the gRPC listener names with
//     hostnames. So a hostname of that form, two labels "<label>.<ns>" or the wildcard
//     "*.<ns>", may be claimed only by a map in namespace <ns>. On whenever the xDS sink is.
//  2. The entitlement policy (--hostname-entitlement, optional): each rule gives a domain
//     (it and every name below it) to a list of namespaces. A hostname that overlaps a
//     rule's domain (is the domain, is below it, or is a wildcard covering part of it) may
//     be claimed only from a namespace every such rule lists. Without rules any namespace
//     may claim any name rule 1 allows, first claim first served.

// Entitlement is one rule of the entitlement policy.
type Entitlement struct {
	// Domain is the domain, e.g. "example.com": the rule covers it and every name below it.
	Domain string
	// Namespaces may claim names under Domain; no other namespace may.
	Namespaces []string
}

// String is the rule as the flag gives it: "example.com=prod,staging".
func (e Entitlement) String() string { return e.Domain + "=" + strings.Join(e.Namespaces, ",") }

// ErrInvalidEntitlement marks a malformed --hostname-entitlement.
var ErrInvalidEntitlement = errors.New("invalid hostname entitlement")

// ParseEntitlement parses "domain=namespace[,namespace...]".
func ParseEntitlement(s string) (Entitlement, error) {
	domain, list, ok := strings.Cut(strings.TrimSpace(s), "=")
	domain = NormalizeHostname(domain)
	if !ok || domain == "" || list == "" {
		return Entitlement{}, fmt.Errorf("%w %q: want domain=namespace[,namespace...]", ErrInvalidEntitlement, s)
	}
	if strings.HasPrefix(domain, "*") {
		return Entitlement{}, fmt.Errorf("%w %q: give the domain without a wildcard; the rule covers every name below it", ErrInvalidEntitlement, s)
	}
	if errs := validation.IsDNS1123Subdomain(domain); len(errs) > 0 {
		return Entitlement{}, fmt.Errorf("%w %q: domain: %s", ErrInvalidEntitlement, s, strings.Join(errs, "; "))
	}
	e := Entitlement{Domain: domain}
	for _, ns := range strings.Split(list, ",") {
		ns = strings.TrimSpace(ns)
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return Entitlement{}, fmt.Errorf("%w %q: namespace %q: %s", ErrInvalidEntitlement, s, ns, strings.Join(errs, "; "))
		}
		e.Namespaces = append(e.Namespaces, ns)
	}
	slices.Sort(e.Namespaces)
	e.Namespaces = slices.Compact(e.Namespaces)
	return e, nil
}

// ClaimPolicy decides which namespace may claim which hostname (see above).
type ClaimPolicy struct {
	// Entitlements are the policy's rules; none means every namespace may claim any name
	// that is not another namespace's gRPC-form name.
	Entitlements []Entitlement
	// GRPCNames turns on rule 1 (the xDS sink is on: gRPC names are served).
	GRPCNames bool
}

// Refusal says why a namespace may not claim a hostname.
type Refusal struct {
	// Rule is the rule that refuses it, readable.
	Rule string
}

// Check returns why a map in namespace may not claim host, nil when it may.
func (p ClaimPolicy) Check(namespace, host string) *Refusal {
	host = NormalizeHostname(host)
	if owner, ok := grpcFormNamespace(host); p.GRPCNames && ok && owner != namespace {
		return &Refusal{Rule: fmt.Sprintf("a name of the form <service>.<namespace> (or *.<namespace>) is a gRPC name of namespace %s, which only maps in namespace %s may claim", owner, owner)}
	}
	for _, e := range p.Entitlements {
		if !HostnamesOverlap(host, e.Domain) && !HostnamesOverlap(host, "*."+e.Domain) {
			continue
		}
		if !slices.Contains(e.Namespaces, namespace) {
			return &Refusal{Rule: fmt.Sprintf("--hostname-entitlement %s gives names under %s to namespace(s) %s only",
				e, e.Domain, strings.Join(e.Namespaces, ", "))}
		}
	}
	return nil
}

// grpcFormNamespace returns ns when host is "<label>.<ns>" or "*.<ns>": the form of a
// gRPC name of namespace ns, or a wildcard over them.
func grpcFormNamespace(host string) (string, bool) {
	first, ns, ok := strings.Cut(host, ".")
	if !ok || first == "" || ns == "" || strings.Contains(ns, ".") {
		return "", false
	}
	return ns, true
}
