// Package console is a node's HTTP/JSON API (/api/v1/...) and its
// embedded web console (/), built on package admin: every request acts
// with the caller's application, so the cluster's own guard decides its
// rights and audits it, as on the client port. docs/http-api.md describes
// the API, docs/console.md the console.
package console

import (
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/transport"
)

//go:embed web
var webFiles embed.FS

// Bounds of the API.
const (
	MaxBody        = 1 << 20 // bytes of a request body
	MaxSessions    = 1024
	SessionExpiry  = 12 * time.Hour
	MaxClients     = 64 // admin clients kept open, one per application
	ClientIdle     = 10 * time.Minute
	DefaultLimit   = 100
	MaxLimit       = 1000
	CSRFHeader     = "X-QMQ-CSRF"
	sessionCookie  = "qmq_session"
	requestTimeout = 30 * time.Second
)

// Config configures New.
type Config struct {
	Servers     []string         // client addresses of cluster nodes to talk to (the node's own first)
	ConnOptions []qmq.ConnOption // TLS options the node uses to reach the cluster
	Auth        bool             // the cluster checks applications: the API requires credentials
	TLS         bool             // the API is served over TLS: cookies are Secure
	Logger      hclog.Logger
	Now         func() time.Time // tests
}

type handler struct {
	cfg      Config
	servers  string
	mux      *http.ServeMux
	log      hclog.Logger
	now      func() time.Time
	sessions *sessions
	clients  *clients
	history  *history
	audit    *auditLog
}

// New returns the HTTP handler of the API (/api/v1/...) and the console (/).
func New(cfg Config) (http.Handler, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("console: no server to talk to")
	}
	h := &handler{cfg: cfg, servers: strings.Join(cfg.Servers, ","), log: cfg.Logger, now: cfg.Now}
	if h.log == nil {
		h.log = hclog.NewNullLogger()
	}
	if h.now == nil {
		h.now = time.Now
	}
	h.sessions = &sessions{m: map[string]*session{}, now: h.now}
	h.clients = &clients{open: h.open, now: h.now, m: map[string]*list.Element{}, lru: list.New()}
	h.history = newHistory(h)
	h.audit = newAuditLog()
	web, err := fs.Sub(webFiles, "web")
	if err != nil {
		return nil, err
	}
	m := http.NewServeMux()
	m.HandleFunc("POST /api/v1/login", h.login)
	m.HandleFunc("POST /api/v1/logout", h.logout)
	m.HandleFunc("GET /api/v1/session", h.api(h.session))
	m.HandleFunc("GET /api/v1/cluster", h.api(h.cluster))
	m.HandleFunc("GET /api/v1/subjects", h.api(h.subjects))
	m.HandleFunc("GET /api/v1/subjects/{subject}", h.api(h.subject))
	m.HandleFunc("GET /api/v1/subjects/{subject}/consumer-groups", h.api(h.consumerGroups))
	m.HandleFunc("GET /api/v1/subjects/{subject}/consumer-groups/{group}", h.api(h.consumerGroup))
	m.HandleFunc("POST /api/v1/subjects/{subject}/consumer-groups/{group}/set", h.api(setGroup))
	m.HandleFunc("POST /api/v1/subjects/{subject}/consumer-groups/{group}/reset", h.api(resetGroup))
	m.HandleFunc("GET /api/v1/subjects/{subject}/consumer-groups/{group}/dead-letters", h.api(h.deadLetters))
	m.HandleFunc("POST /api/v1/subjects/{subject}/consumer-groups/{group}/dead-letters/resend", h.api(resendDead))
	m.HandleFunc("POST /api/v1/subjects/{subject}/consumer-groups/{group}/dead-letters/purge", h.api(purgeDead))
	m.HandleFunc("GET /api/v1/delays", h.api(h.delays))
	m.HandleFunc("GET /api/v1/history", h.api(h.historyGet))
	m.HandleFunc("GET /api/v1/messages/{id}", h.api(h.messageByID))
	m.HandleFunc("GET /api/v1/subjects/{subject}/messages", h.api(h.subjectMessages))
	m.HandleFunc("GET /api/v1/subjects/{subject}/messages/export", h.api(h.exportMessages))
	m.HandleFunc("GET /api/v1/subjects/{subject}/consumer-groups/{group}/dead-letters/export", h.api(h.exportDeadLetters))
	m.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint")
	})
	files := http.FileServerFS(web)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, http.StatusMethodNotAllowed, "method", "the console's files are read with GET")
			return
		}
		files.ServeHTTP(w, r)
	})
	h.mux = m
	return h, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	if r.Method == http.MethodOptions {
		// No CORS: a preflight is never answered with permission.
		writeError(w, http.StatusMethodNotAllowed, "method", "no cross-origin requests")
		return
	}
	if !h.cfg.Auth && !literalHost(r.Host) {
		// Without authentication, a name another site controls could be
		// made to resolve to this node (DNS rebinding) and its pages would
		// be same-origin: only an address or localhost is answered.
		writeError(w, http.StatusMisdirectedRequest, "host",
			"without --auth the console answers requests to an IP address or localhost only, not "+fmt.Sprintf("%.100q", r.Host))
		return
	}
	h.mux.ServeHTTP(w, r)
}

// literalHost reports whether host (HOST[:PORT]) is an IP address or
// localhost, names no other site can make resolve to this node.
func literalHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return net.ParseIP(host) != nil || strings.EqualFold(host, "localhost")
}

// caller is who an API request acts as.
type caller struct {
	code, secret string
	csrf         string // the session's token; "" with Basic auth or auth off
	session      bool
}

// apiFunc answers an API request with a value to encode, or an error.
type apiFunc func(r *http.Request, c caller, a *admin.Client) (any, error)

// api wraps f with authentication, the CSRF check of POSTs, the audit
// line of each POST (an action) and the encoding of its answer.
func (h *handler) api(f apiFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, ok := h.authenticate(w, r)
		if !ok {
			return
		}
		post := r.Method == http.MethodPost
		if post {
			if _, msg := checkCSRF(r, c); msg != "" {
				h.action(r, c, csrfError{msg})
				writeErr(w, csrfError{msg})
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
		}
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		out, err := h.call(r.WithContext(ctx), c, f)
		if post {
			h.action(r, c, err)
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		if st, ok := out.(stream); ok {
			st(w)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// call answers r with f and c's admin client.
func (h *handler) call(r *http.Request, c caller, f apiFunc) (any, error) {
	a, err := h.clients.get(c.code, c.secret)
	if err != nil {
		return nil, err
	}
	out, err := f(r, c, a)
	if errors.Is(err, qmq.ErrUnauthenticated) {
		// Credentials the cluster refused keep no client: random
		// secrets must not fill the cache with connections.
		h.clients.drop(c.code, c.secret)
	}
	return out, err
}

// authenticate finds the caller: Basic auth or a session cookie with
// Auth, nobody without.
func (h *handler) authenticate(w http.ResponseWriter, r *http.Request) (caller, bool) {
	if !h.cfg.Auth {
		return caller{}, true
	}
	if code, secret, ok := r.BasicAuth(); ok {
		if err := checkCode(code); err != nil || len(secret) == 0 || len(secret) > 1024 {
			writeError(w, http.StatusUnauthorized, "unauthenticated", "bad credentials")
			return caller{}, false
		}
		return caller{code: code, secret: secret}, true
	}
	if ck, err := r.Cookie(sessionCookie); err == nil {
		if s := h.sessions.get(ck.Value); s != nil {
			return caller{code: s.code, secret: s.secret, csrf: s.csrf, session: true}, true
		}
	}
	// A browser asked by a challenge prompts for a password over the
	// console's own login form, and holds the page's request until the
	// prompt is answered: the challenge goes to everyone but a script's
	// request in a browser (Sec-Fetch-Mode other than navigate).
	if m := r.Header.Get("Sec-Fetch-Mode"); m == "" || m == "navigate" {
		w.Header().Set("WWW-Authenticate", `Basic realm="qmq"`)
	}
	writeError(w, http.StatusUnauthorized, "unauthenticated", "log in, or give an application's code and secret (HTTP Basic)")
	return caller{}, false
}

// checkCSRF refuses a POST without the CSRF header (with a session: one
// not equal to its token), or one a browser says came from another site.
func checkCSRF(r *http.Request, c caller) (code, msg string) {
	tok := r.Header.Get(CSRFHeader)
	switch {
	case tok == "":
		return "csrf", "missing " + CSRFHeader + " header"
	case c.session && subtle.ConstantTimeCompare([]byte(tok), []byte(c.csrf)) != 1:
		return "csrf", "wrong " + CSRFHeader + " token"
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return "csrf", "cross-site request refused"
	}
	if o := r.Header.Get("Origin"); o != "" {
		host, ok := strings.CutPrefix(o, "http://")
		if !ok {
			host, ok = strings.CutPrefix(o, "https://")
		}
		if !ok || !strings.EqualFold(host, r.Host) {
			return "csrf", "cross-origin request refused"
		}
	}
	return "", ""
}

// open opens an admin client for an application ("" without Auth).
func (h *handler) open(code, secret string) (*admin.Client, error) {
	opts := append([]qmq.ConnOption(nil), h.cfg.ConnOptions...)
	if code != "" {
		opts = append(opts, qmq.WithApp(code, secret))
	}
	return admin.New(h.servers, opts...)
}

// loginRequest is the body of POST /api/v1/login.
type loginRequest struct {
	Code   string `json:"code"`
	Secret string `json:"secret"`
}

func decodeLogin(b []byte) (loginRequest, error) {
	var l loginRequest
	if err := decodeStrict(b, &l); err != nil {
		return l, err
	}
	if err := checkCode(l.Code); err != nil {
		return l, err
	}
	if l.Secret == "" || len(l.Secret) > 1024 {
		return l, errors.New("secret: 1 to 1,024 bytes")
	}
	return l, nil
}

func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if code, msg := checkCSRF(r, caller{}); code != "" {
		writeError(w, http.StatusForbidden, code, msg)
		return
	}
	if !h.cfg.Auth {
		writeError(w, http.StatusBadRequest, "invalid", "the cluster does not check applications: no login")
		return
	}
	b, err := readBody(w, r)
	if err != nil {
		writeErr(w, err)
		return
	}
	l, err := decodeLogin(b)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	a, err := h.clients.get(l.Code, l.Secret)
	if err == nil {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		_, err = a.Cluster(ctx) // the cluster checks the secret
		cancel()
	}
	if err != nil {
		h.clients.drop(l.Code, l.Secret)
		writeErr(w, err)
		return
	}
	s := h.sessions.add(l.Code, l.Secret)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: h.cfg.TLS || r.TLS != nil, MaxAge: int(SessionExpiry / time.Second)})
	writeJSON(w, http.StatusOK, map[string]any{"app": s.code, "csrf": s.csrf, "expires": s.expires})
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		s := h.sessions.get(ck.Value)
		if s != nil {
			if code, msg := checkCSRF(r, caller{csrf: s.csrf, session: true}); code != "" {
				writeError(w, http.StatusForbidden, code, msg)
				return
			}
			h.sessions.remove(ck.Value)
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (h *handler) session(r *http.Request, c caller, a *admin.Client) (any, error) {
	return map[string]any{"auth": h.cfg.Auth, "app": c.code, "csrf": c.csrf}, nil
}

// Errors.

type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// csrfError is a POST refused by checkCSRF, for its audit line.
type csrfError struct{ msg string }

func (e csrfError) Error() string { return e.msg }

// badRequest is an input the API refuses itself.
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return badRequest{fmt.Sprintf(format, args...)} }

// statusOf maps an error of qmq or admin to its HTTP status and code.
func statusOf(err error) (int, string) {
	var br badRequest
	var ce csrfError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &br):
		return http.StatusBadRequest, "invalid"
	case errors.As(err, &ce):
		return http.StatusForbidden, "csrf"
	case errors.As(err, &mb):
		return http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, qmq.ErrUnauthenticated):
		return http.StatusUnauthorized, "unauthenticated"
	case errors.Is(err, qmq.ErrPermissionDenied):
		return http.StatusForbidden, "permission_denied"
	case errors.Is(err, admin.ErrNoConsumerGroup):
		return http.StatusNotFound, "no_consumer_group"
	case errors.Is(err, admin.ErrNoDeadLetter):
		return http.StatusNotFound, "no_dead_letter"
	case errors.Is(err, admin.ErrNotInRoute):
		return http.StatusNotFound, "not_in_route"
	case errors.Is(err, qmq.ErrInvalidName), errors.Is(err, admin.ErrBadQuery):
		return http.StatusBadRequest, "invalid"
	case errors.Is(err, qmq.ErrUnreachable):
		return http.StatusServiceUnavailable, "unreachable"
	}
	if code := transport.CodeOf(err); code == transport.Invalid {
		return http.StatusBadRequest, "invalid"
	} else if code == transport.Unavailable || code == transport.NotLeader {
		return http.StatusServiceUnavailable, "unavailable"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusServiceUnavailable, "unreachable"
	}
	return http.StatusInternalServerError, "internal"
}

func writeErr(w http.ResponseWriter, err error) {
	st, code := statusOf(err)
	writeError(w, st, code, err.Error())
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiError{Error: msg, Code: code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// Sessions.

type session struct {
	id, csrf     string
	code, secret string
	expires      time.Time
}

type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	now func() time.Time
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *sessions) add(code, secret string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.m) >= MaxSessions {
		var oldest *session
		for id, x := range s.m {
			if now.After(x.expires) {
				delete(s.m, id)
			} else if oldest == nil || x.expires.Before(oldest.expires) {
				oldest = x
			}
		}
		if len(s.m) >= MaxSessions {
			delete(s.m, oldest.id)
		}
	}
	x := &session{id: randomToken(), csrf: randomToken(), code: code, secret: secret, expires: now.Add(SessionExpiry)}
	s.m[x.id] = x
	return x
}

func (s *sessions) get(id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.m[id]
	if x != nil && s.now().After(x.expires) {
		delete(s.m, id)
		return nil
	}
	return x
}

func (s *sessions) remove(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// Admin clients, one per application, in a bounded LRU.

type clientEntry struct {
	key  string
	a    *admin.Client
	used time.Time
}

type clients struct {
	mu   sync.Mutex
	open func(code, secret string) (*admin.Client, error)
	now  func() time.Time
	m    map[string]*list.Element
	lru  *list.List // front: most recently used
}

func clientKey(code, secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return code + "\x00" + hex.EncodeToString(sum[:])
}

func (c *clients) get(code, secret string) (*admin.Client, error) {
	key := clientKey(code, secret)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for e := c.lru.Back(); e != nil; {
		prev := e.Prev()
		if ce := e.Value.(*clientEntry); now.Sub(ce.used) > ClientIdle || c.lru.Len() > MaxClients {
			c.evict(e)
		}
		e = prev
	}
	if e, ok := c.m[key]; ok {
		e.Value.(*clientEntry).used = now
		c.lru.MoveToFront(e)
		return e.Value.(*clientEntry).a, nil
	}
	a, err := c.open(code, secret)
	if err != nil {
		return nil, err
	}
	c.m[key] = c.lru.PushFront(&clientEntry{key: key, a: a, used: now})
	if c.lru.Len() > MaxClients {
		c.evict(c.lru.Back())
	}
	return a, nil
}

func (c *clients) drop(code, secret string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[clientKey(code, secret)]; ok {
		c.evict(e)
	}
}

func (c *clients) evict(e *list.Element) {
	ce := e.Value.(*clientEntry)
	c.lru.Remove(e)
	delete(c.m, ce.key)
	// A request that took it before may still use it: its context ends
	// within requestTimeout.
	time.AfterFunc(requestTimeout, func() { ce.a.Close() })
}
