//go:build tools

package deps

import (
	_ "github.com/hashicorp/memberlist"
	_ "github.com/hashicorp/raft"
	_ "github.com/hashicorp/raft-wal"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/quic-go/quic-go"
	_ "github.com/spf13/cobra"
	_ "go.etcd.io/bbolt"
	_ "go.uber.org/goleak"
	_ "pgregory.net/rapid"
	_ "sigs.k8s.io/yaml"
)
