package fault

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// APIKeyCreateTopics is the Kafka API key of CreateTopics requests.
const APIKeyCreateTopics int16 = 19

// HoldProxy forwards TCP connections to a Kafka broker and reads what clients send as Kafka
// request frames (an int32 big-endian size, then the request header: int16 api_key, int16
// api_version, int32 correlation_id, ...). While a hold is on, a frame whose API key is one of
// those given to NewHoldProxy waits, with everything behind it on its connection, until the hold
// is released; then it goes on to the broker unchanged. Every other frame, and everything the
// broker sends, passes at once.
//
// franz-go sends requests that carry a TimeoutMillis (CreateTopics, DeleteTopics,
// CreatePartitions, DeleteRecords, ...) on a connection of their own, apart from produce,
// fetch, transaction and metadata requests, so holding CreateTopics holds a client's topic
// administration and nothing else: a broker whose controller is slow to create topics.
type HoldProxy struct {
	ln   net.Listener
	keys map[int16]bool

	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	// gate is open (not nil) while a hold is on; Release closes it.
	gate   chan struct{}
	closed bool
	// seen counts the frames of each held key that went through the proxy, held or not.
	seen map[int16]int64
	// done is closed by Close: held frames give up.
	done chan struct{}
	wg   sync.WaitGroup

	held    atomic.Int64 // frames that waited for a hold
	waiting atomic.Int64 // frames waiting now
}

// NewHoldProxy listens on addr (e.g. "127.0.0.1:0") and forwards to target; a hold catches frames
// of the given API keys. An empty target refuses connections until SetTarget names one.
func NewHoldProxy(addr, target string, keys ...int16) (*HoldProxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &HoldProxy{ln: ln, target: target, keys: make(map[int16]bool), conns: make(map[net.Conn]struct{}),
		seen: make(map[int16]int64), done: make(chan struct{})}
	for _, k := range keys {
		p.keys[k] = true
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *HoldProxy) Addr() string { return p.ln.Addr().String() }

// Port is the listening port.
func (p *HoldProxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// SetTarget changes where new connections are forwarded.
func (p *HoldProxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Hold makes frames of the held keys wait from now on, until Release.
func (p *HoldProxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

// Release ends the hold: the frames waiting go on, in order on each connection.
func (p *HoldProxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

// Held is how many frames waited for a hold so far (those waiting now included).
func (p *HoldProxy) Held() int64 { return p.held.Load() }

// Waiting is how many frames wait for the hold now.
func (p *HoldProxy) Waiting() int64 { return p.waiting.Load() }

// Seen is how many frames of key (one of the held keys) reached the proxy, held or not.
func (p *HoldProxy) Seen(key int16) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[key]
}

// Conns is how many client connections the proxy carries now.
func (p *HoldProxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// Close stops listening, lets held frames give up and closes every connection.
func (p *HoldProxy) Close() error {
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

func (p *HoldProxy) accept() {
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

func (p *HoldProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *HoldProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *HoldProxy) serve(client net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	if target == "" {
		_ = client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	// Either side ending ends both.
	end := func() {
		p.untrack(client)
		p.untrack(server)
	}
	go func() {
		defer wg.Done()
		defer end()
		_ = p.requests(server, client)
	}()
	go func() {
		defer wg.Done()
		defer end()
		_, _ = io.Copy(client, server)
	}()
	wg.Wait()
}

// maxFrame bounds a request frame's size: anything larger is not Kafka (or is broken), and the
// connection is closed. The broker's own limit (socket.request.max.bytes) is 100 MiB.
const maxFrame = 100 << 20

// requests forwards the client's request frames to the server, one at a time, making each frame
// of a held key wait while a hold is on.
func (p *HoldProxy) requests(server, client net.Conn) error {
	r := bufio.NewReaderSize(client, 64<<10)
	// head is the frame's size and the first fields of its request header.
	var head [8]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return err
		}
		size := int64(binary.BigEndian.Uint32(head[0:4]))
		key := int16(binary.BigEndian.Uint16(head[4:6]))
		if size < 4 || size > maxFrame {
			return errors.New("not a Kafka request frame")
		}
		if p.keys[key] {
			if err := p.wait(key); err != nil {
				return err
			}
		}
		if _, err := server.Write(head[:]); err != nil {
			return err
		}
		if _, err := io.CopyN(server, r, size-4); err != nil {
			return err
		}
	}
}

// wait counts a frame of a held key and returns once no hold is on (at once when none is), or
// an error when the proxy closes first.
func (p *HoldProxy) wait(key int16) error {
	p.mu.Lock()
	p.seen[key]++
	gate := p.gate
	p.mu.Unlock()
	if gate == nil {
		return nil
	}
	p.held.Add(1)
	p.waiting.Add(1)
	defer p.waiting.Add(-1)
	select {
	case <-gate:
		return nil
	case <-p.done:
		return net.ErrClosed
	}
}
