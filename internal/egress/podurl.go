package egress

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// ValidPort checks a port from a pod annotation: a number in 1..65535.
func ValidPort(field, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != v {
		return fmt.Errorf("%s: %q is not a port number", field, v)
	}
	return nil
}

// PodURL is the http URL of path on a pod's own IP and port. Pods are cluster-internal by
// nature, so requests to them do not go through a Policy; instead the URL is built from parts
// so that annotations (the pod owner's) cannot name another host: port must be a number and
// path a plain absolute path (no "?", "#", "@", "\", space or ".." segment). Errors name field.
func PodURL(field, podIP, port, path string) (string, error) {
	ip, err := netip.ParseAddr(podIP)
	if err != nil {
		return "", fmt.Errorf("status.podIP %q: not an IP address", podIP)
	}
	if err := ValidPort(field, port); err != nil {
		return "", err
	}
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "?#@\\ ") || slices.Contains(strings.Split(path, "/"), "..") {
		return "", fmt.Errorf("%s: %q is not an absolute path", field, path)
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(ip.String(), port), Path: path}
	return u.String(), nil
}
