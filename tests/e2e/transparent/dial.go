// A raw net.Dial that ignores every proxy setting (tests/e2e/transparent.sh):
// dial ADDR, send an HTTP/1.0 request with Host HOST, print the status line.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	c, err := net.DialTimeout("tcp", os.Args[1], 15*time.Second)
	if err != nil {
		fmt.Println("go-dial error", err)
		os.Exit(1)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", os.Args[2])
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Println("go-dial error", err)
		os.Exit(1)
	}
	fmt.Println("go-dial", strings.Fields(line)[1])
}
