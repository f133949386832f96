package fault

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections from a local listener to a target address and can cut every
// connection it carries at once, as a network failure would.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	links  map[*link]struct{}
	closed bool
	// done is closed by Close: stalled links give up.
	done chan struct{}
	wg   sync.WaitGroup
	cuts atomic.Int64
	// blackhole: new connections are accepted and read, and nothing is forwarded (see Blackhole).
	blackhole atomic.Bool
	holes     atomic.Int64
}

// NewProxy listens on addr (e.g. "127.0.0.1:0") and forwards to target. An empty target refuses
// connections (closes them at once) until SetTarget names one.
func NewProxy(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{}), links: make(map[*link]struct{}), done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the listening port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Cut closes every connection currently open through the proxy (both sides) and returns how
// many client connections it closed. New connections are accepted as before.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not a polite FIN
		}
		_ = c.Close()
		delete(p.conns, c)
		n++
	}
	p.cuts.Add(1)
	// Each forwarded connection is two sockets.
	return n / 2
}

// Stall stops forwarding the bytes of every connection open now, in both directions, without
// closing them: a middlebox whose path died while it keeps the connections open (TCP keepalives
// are answered by the kernel on both sides). New connections are forwarded as before. It returns
// how many client connections it stalled; they stay open until Close.
func (p *Proxy) Stall() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.stalled.Store(true)
	}
	return len(p.links)
}

// Blackhole makes the proxy a dead path: the connections open now are stalled (see Stall), and
// new ones are accepted and read but never forwarded nor answered, as a server that accepts and
// then hangs, or a path that died behind a middlebox. It returns how many client connections it
// stalled. Heal ends it for new connections.
func (p *Proxy) Blackhole() int {
	p.blackhole.Store(true)
	return p.Stall()
}

// Heal makes the proxy forward new connections again after Blackhole. The connections stalled
// meanwhile stay stalled: their bytes are gone, and the client has to notice and reconnect.
func (p *Proxy) Heal() { p.blackhole.Store(false) }

// Holes is how many connections the proxy accepted while it was a blackhole.
func (p *Proxy) Holes() int64 { return p.holes.Load() }

// Stalled is how many stalled client connections are still open.
func (p *Proxy) Stalled() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for l := range p.links {
		if l.stalled.Load() && !l.closed.Load() {
			n++
		}
	}
	return n
}

// link is one forwarded client connection.
type link struct {
	stalled atomic.Bool
	closed  atomic.Bool
}

// SetTarget changes where new connections are forwarded.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Conns is how many client connections the proxy carries now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// Cuts is how many times Cut was called.
func (p *Proxy) Cuts() int64 { return p.cuts.Load() }

// Close stops listening and closes every connection.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	if target == "" {
		_ = client.Close()
		return
	}
	if p.blackhole.Load() {
		p.swallow(client)
		return
	}
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		// The server is down (being restarted): the client sees a closed connection.
		_ = client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	l := &link{}
	p.mu.Lock()
	p.links[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		l.closed.Store(true)
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		p.copy(l, dst, src)
		if l.stalled.Load() {
			// A stalled path never passes a close on: the other side must not notice.
			<-p.done
		}
		// Either side ending ends both: simpler than half-close, and what a cut looks like.
		p.untrack(dst)
		p.untrack(src)
	}
	go pipe(server, client)
	go pipe(client, server)
	wg.Wait()
}

// swallow reads client until it closes (or the proxy does) and never answers.
func (p *Proxy) swallow(client net.Conn) {
	if !p.track(client) {
		_ = client.Close()
		return
	}
	p.holes.Add(1)
	defer p.untrack(client)
	buf := make([]byte, 32<<10)
	for {
		if _, err := client.Read(buf); err != nil {
			return
		}
	}
}

// copy forwards src to dst until either fails, or until l is stalled: then it holds what it
// read and forwards nothing more.
func (p *Proxy) copy(l *link, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if l.stalled.Load() {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
