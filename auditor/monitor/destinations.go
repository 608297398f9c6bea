package monitor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// DestinationPolicy decides where alert notifications may go. An alert
// channel's URL is written by an admin, but the auditor sends from inside
// the network: without a policy a channel could reach the cloud metadata
// service, a database's HTTP port or anything else only the auditor can
// reach. So by default a notification goes only to a public address:
// loopback, link-local (169.254.0.0/16, which holds the metadata
// services; fe80::/10), private (10/8, 172.16/12, 192.168/16, fc00::/7),
// shared (100.64/10), unspecified, multicast and other special-purpose
// addresses are refused, and so is a URL with credentials (user:pass@).
//
// The address is checked where the connection is made, after name
// resolution, so a host name that resolves to a refused address is
// refused too (a DNS answer cannot smuggle one in). A redirect is followed
// only to a URL the policy allows, at most 3 times. No proxy from the
// environment is used: the auditor connects to the receiver itself.
type DestinationPolicy struct {
	// Allow names the destinations that are reachable although the rules
	// above refuse them: a host name as written in the URL
	// ("alerts.internal"), an address ("10.0.0.7", "::1") or a network in
	// CIDR notation ("10.20.0.0/16"). A URL with credentials is sent only
	// to a host or address Allow names. Empty: public addresses only.
	Allow []string
}

// errDenied marks a destination the policy refuses.
var errDenied = errors.New("refused by the alert destination policy")

// compiled is a DestinationPolicy ready to check.
type compiled struct {
	hosts    map[string]bool
	prefixes []netip.Prefix
}

func (p DestinationPolicy) compile() (*compiled, error) {
	c := &compiled{hosts: map[string]bool{}}
	for _, a := range p.Allow {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if pre, err := netip.ParsePrefix(a); err == nil {
			c.prefixes = append(c.prefixes, pre.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(strings.Trim(a, "[]")); err == nil {
			c.prefixes = append(c.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		if strings.ContainsAny(a, "/:@ ") {
			return nil, fmt.Errorf("alert destination %q is neither a host name, an address nor a network in CIDR notation", a)
		}
		c.hosts[strings.ToLower(strings.TrimSuffix(a, "."))] = true
	}
	return c, nil
}

// special are the ranges refused unless allowed (besides what netip
// classifies: loopback, link-local, private, unspecified, multicast).
var special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),  // shared address space (carrier-grade NAT)
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, and the broadcast address
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64, which maps IPv4 (metadata included)
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
	netip.MustParsePrefix("2002::/16"),      // 6to4, which embeds any IPv4 address
	netip.MustParsePrefix("fec0::/10"),      // site-local (deprecated)
	netip.MustParsePrefix("100::/64"),       // discard-only
	netip.MustParsePrefix("2001::/32"),      // Teredo, which embeds an IPv4 address
	netip.MustParsePrefix("2001:10::/28"),   // ORCHID
	netip.MustParsePrefix("2001:20::/28"),   // ORCHIDv2
	netip.MustParsePrefix("255.255.255.255/32"),
}

// allowedAddr reports whether a connection to ip is allowed.
func (c *compiled) allowedAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range c.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	for _, p := range special {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// allowedHost reports whether host, as written in a URL, is named by the
// allow list (by name, or as an address in an allowed network).
func (c *compiled) allowedHost(host string) bool {
	if c.hosts[strings.ToLower(strings.TrimSuffix(host, "."))] {
		return true
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		for _, p := range c.prefixes {
			if p.Contains(ip.Unmap()) {
				return true
			}
		}
	}
	return false
}

// checkURL refuses a URL the policy does not allow before any connection:
// another scheme than http or https, credentials for a host the allow
// list does not name, or a host that is a number in another spelling than
// a plain address (0x7f000001, 2130706433, 127.1), which some resolvers
// read as an address. Addresses are checked again at dial time.
func (c *compiled) checkURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: scheme %q; use http or https", errDenied, u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("%w: the URL has no host", errDenied)
	}
	if u.User != nil && !c.allowedHost(host) {
		return fmt.Errorf("%w: the URL holds credentials (user:password@) for a host the allow list does not name", errDenied)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !c.allowedAddr(ip) {
			return fmt.Errorf("%w: %s is not a public address; name it in the allow list to reach it", errDenied, ip)
		}
		return nil
	}
	if looksNumeric(host) {
		return fmt.Errorf("%w: host %q is an address in an unusual spelling; write it as a plain address", errDenied, host)
	}
	return nil
}

// looksNumeric reports whether every dot-separated part of host is a
// decimal, octal or hexadecimal number.
func looksNumeric(host string) bool {
	for part := range strings.SplitSeq(strings.ToLower(host), ".") {
		if part == "" {
			return false
		}
		digits := strings.TrimPrefix(part, "0x")
		hex := digits != part
		if digits == "" && !hex {
			return false
		}
		for _, r := range digits {
			if !(r >= '0' && r <= '9' || hex && r >= 'a' && r <= 'f') {
				return false
			}
		}
	}
	return true
}

// maxRedirects is how many redirects a notification follows.
const maxRedirects = 3

// client returns the HTTP client that sends notifications under the
// policy, with the timeout of one request.
func (c *compiled) client(timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: timeout}
	transport := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return nil, err
			}
			d := *dialer
			if !c.allowedHost(host) {
				// Control sees every address the name resolved to, just
				// before the connection to it is made.
				d.Control = func(_, address string, _ syscall.RawConn) error {
					ap, err := netip.ParseAddrPort(address)
					if err != nil {
						return fmt.Errorf("%w: %s: %v", errDenied, address, err)
					}
					if !c.allowedAddr(ap.Addr()) {
						return fmt.Errorf("%w: %s resolves to %s, not a public address; name it in the allow list to reach it", errDenied, host, ap.Addr())
					}
					return nil
				}
			}
			return d.DialContext(ctx, network, address)
		},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          10,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{
		Timeout:   timeout,
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxRedirects {
				return fmt.Errorf("%w: more than %d redirects", errDenied, maxRedirects)
			}
			if err := c.checkURL(req.URL); err != nil {
				return fmt.Errorf("redirect: %w", err)
			}
			return nil
		},
	}
}
