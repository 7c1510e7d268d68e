package pgreplicahttp

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// responseWriter calls before exactly once, just before the status line and
// headers can leave: on the first final WriteHeader, Write, Flush, ReadFrom
// or Hijack. The middleware adds its Set-Cookie and token header there.
//
// It always implements http.Flusher (and FlushError, for
// http.ResponseController) and io.ReaderFrom, which it can emulate; the
// variants below add http.Hijacker and http.Pusher only when the wrapped
// writer has them, so a type assertion on the wrapper answers what the
// connection can do. Unwrap lets http.ResponseController reach everything
// else (deadlines, full duplex).
type responseWriter struct {
	http.ResponseWriter
	before func()
	called bool
}

// wrap returns the wrapper and the http.ResponseWriter to hand to the
// handler: the wrapper, extended by the optional interfaces w has.
func wrap(w http.ResponseWriter, before func()) (*responseWriter, http.ResponseWriter) {
	rw := &responseWriter{ResponseWriter: w, before: before}
	_, canHijack := w.(http.Hijacker)
	_, canPush := w.(http.Pusher)
	switch {
	case canHijack && canPush:
		return rw, hijackPusher{rw}
	case canHijack:
		return rw, hijacker{rw}
	case canPush:
		return rw, pusher{rw}
	}
	return rw, rw
}

// headersDone runs before once.
func (w *responseWriter) headersDone() {
	if !w.called {
		w.called = true
		w.before()
	}
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// WriteHeader implements http.ResponseWriter. Informational responses
// (1xx other than 101) do not end the headers: the final response follows.
func (w *responseWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.headersDone()
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *responseWriter) Write(b []byte) (int, error) {
	w.headersDone()
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError flushes like Flush and reports the error, which is what
// http.ResponseController.Flush calls.
func (w *responseWriter) FlushError() error {
	w.headersDone()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// ReadFrom implements io.ReaderFrom, keeping the sendfile path of the
// wrapped writer where it has one.
func (w *responseWriter) ReadFrom(r io.Reader) (int64, error) {
	w.headersDone()
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(w.ResponseWriter, r)
}

type hijacker struct{ *responseWriter }

// Hijack implements http.Hijacker. The middleware's headers cannot be sent
// any more, but a server-side store still receives the token.
func (w hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.headersDone()
	return w.ResponseWriter.(http.Hijacker).Hijack()
}

type pusher struct{ *responseWriter }

// Push implements http.Pusher.
func (w pusher) Push(target string, opts *http.PushOptions) error {
	return w.ResponseWriter.(http.Pusher).Push(target, opts)
}

type hijackPusher struct{ *responseWriter }

// Hijack implements http.Hijacker.
func (w hijackPusher) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return hijacker(w).Hijack()
}

// Push implements http.Pusher.
func (w hijackPusher) Push(target string, opts *http.PushOptions) error {
	return pusher(w).Push(target, opts)
}
