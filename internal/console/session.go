package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"
)

// CookieName is the session cookie. The __Host- prefix makes the browser
// keep it only when it is Secure, for this host, with Path=/.
const CookieName = "__Host-fednet-console"

// SessionTTL is how long a session lasts after login.
const SessionTTL = 12 * time.Hour

// sessions issues and checks session cookies. A session is
// base64url(expiry || nonce) "." base64url(HMAC-SHA256(key, expiry || nonce)):
// nothing is stored per session, so a session is good at every manager
// that has the same key (the key derives from the admin token), until it
// expires, the admin token changes, or it logs out here. Safe for
// concurrent use.
type sessions struct {
	key []byte
	now func() time.Time

	mu      sync.Mutex
	revoked map[string]time.Time // nonce -> expiry, sessions logged out
}

const nonceLen = 16

// errNoSession is a request without a valid session.
var errNoSession = errors.New("no valid session")

// issue returns a new session cookie value and its expiry.
func (s *sessions) issue() (string, time.Time, error) {
	exp := s.now().Add(SessionTTL).Truncate(time.Second)
	msg := make([]byte, 8+nonceLen)
	binary.BigEndian.PutUint64(msg, uint64(exp.Unix()))
	if _, err := rand.Read(msg[8:]); err != nil {
		return "", time.Time{}, err
	}
	return enc(msg) + "." + enc(s.sign(msg)), exp, nil
}

func (s *sessions) sign(msg []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("fednet console session\x00"))
	m.Write(msg)
	return m.Sum(nil)
}

func enc(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// check returns the expiry of the request's session, or errNoSession.
func (s *sessions) check(r *http.Request) (time.Time, error) {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return time.Time{}, errNoSession
	}
	msg, exp, ok := s.parse(c.Value)
	if !ok {
		return time.Time{}, errNoSession
	}
	s.mu.Lock()
	_, out := s.revoked[string(msg[8:])]
	s.mu.Unlock()
	if out {
		return time.Time{}, errNoSession
	}
	return exp, nil
}

// parse verifies a cookie value: signature and expiry.
func (s *sessions) parse(v string) (msg []byte, exp time.Time, ok bool) {
	m, sig, found := strings.Cut(v, ".")
	if !found {
		return nil, time.Time{}, false
	}
	msg, err1 := base64.RawURLEncoding.DecodeString(m)
	mac, err2 := base64.RawURLEncoding.DecodeString(sig)
	if err1 != nil || err2 != nil || len(msg) != 8+nonceLen || !hmac.Equal(mac, s.sign(msg)) {
		return nil, time.Time{}, false
	}
	exp = time.Unix(int64(binary.BigEndian.Uint64(msg)), 0)
	if !s.now().Before(exp) {
		return nil, time.Time{}, false
	}
	return msg, exp, true
}

// revoke ends the request's session at this console (logout).
func (s *sessions) revoke(r *http.Request) {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return
	}
	msg, exp, ok := s.parse(c.Value)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for n, e := range s.revoked {
		if !now.Before(e) {
			delete(s.revoked, n)
		}
	}
	if s.revoked == nil {
		s.revoked = map[string]time.Time{}
	}
	if len(s.revoked) < maxRevoked {
		s.revoked[string(msg[8:])] = exp
	}
}

// maxRevoked bounds the logged-out sessions remembered until they expire.
const maxRevoked = 10000

// cookie is the session cookie carrying value until exp; an empty value
// deletes it.
func cookie(value string, exp time.Time) *http.Cookie {
	c := &http.Cookie{Name: CookieName, Value: value, Path: "/", Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = exp
		c.MaxAge = int(SessionTTL.Seconds())
	}
	return c
}
