package main

import (
	"net/url"

	"github.com/idemgo/idem/internal/testenv"
)

// proxy is testenv's TCP proxy: the harness cuts every connection to a
// shared server through it.
type proxy = testenv.Proxy

func newProxy(upstream string) (*proxy, error) { return testenv.NewProxy(upstream) }

// urlHost returns the host:port of a server's URL, for a proxy to it.
func urlHost(s string) ([]string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	return []string{u.Host}, nil
}
