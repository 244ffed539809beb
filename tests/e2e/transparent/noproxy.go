// net/http with Proxy: nil (tests/e2e/transparent.sh): GET URL directly,
// print the status code.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	cl := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 15 * time.Second}
	r, err := cl.Get(os.Args[1])
	if err != nil {
		fmt.Println("go-http error", err)
		os.Exit(1)
	}
	io.Copy(io.Discard, r.Body)
	fmt.Println("go-http", r.StatusCode)
}
