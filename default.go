package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/coredns/caddy"
	"github.com/meshdns/meshdns/corefile"
)

// demoDir is where the embedded demo was unpacked; it is unpacked once per
// process so that a reload (SIGUSR1) reuses the same files.
var (
	demoOnce sync.Once
	demoDir  string
	demoErr  error
)

// defaultLoader replaces CoreDNS's: with no -conf it serves ./Corefile when
// one exists (as CoreDNS does) and otherwise the embedded demo, unpacked into
// a private directory that becomes the working directory, so the demo's
// relative data paths resolve.
func defaultLoader(serverType string) (caddy.Input, error) {
	if contents, err := os.ReadFile(caddy.DefaultConfigFile); err == nil {
		return caddy.CaddyfileInput{Contents: contents, Filepath: caddy.DefaultConfigFile, ServerTypeName: serverType}, nil
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	demoOnce.Do(func() {
		demoDir, demoErr = unpackDemo()
		if demoErr == nil {
			dir := demoDir
			caddy.OnProcessExit = append(caddy.OnProcessExit, func() { os.RemoveAll(dir) })
		}
	})
	if demoErr != nil {
		return nil, fmt.Errorf("unpacking the embedded Corefile: %w", demoErr)
	}
	if err := os.Chdir(demoDir); err != nil {
		return nil, err
	}
	contents, err := fs.ReadFile(corefile.Files, "Corefile")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "meshdns: no -conf and no ./Corefile: serving the embedded demo Corefile from %s\n", demoDir)
	return caddy.CaddyfileInput{Contents: contents, Filepath: filepath.Join(demoDir, "Corefile"), ServerTypeName: serverType}, nil
}

// unpackDemo writes the embedded corefile/ tree into a new temporary directory.
func unpackDemo() (string, error) {
	dir, err := os.MkdirTemp("", "meshdns-demo-")
	if err != nil {
		return "", err
	}
	err = fs.WalkDir(corefile.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := fs.ReadFile(corefile.Files, p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	return dir, err
}
