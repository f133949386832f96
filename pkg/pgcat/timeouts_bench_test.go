package pgcat

import (
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkRead reads 8 KiB chunks from a loopback TCP connection, as pgconn does, with and
// without the receive bound: the bound's cost is a deadline set per read.
func BenchmarkRead(b *testing.B) {
	for _, watched := range []bool{false, true} {
		name := "raw"
		if watched {
			name = "watched"
		}
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if watched {
				c = Watch(c, time.Minute)
			}
			buf := make([]byte, 8<<10)
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
