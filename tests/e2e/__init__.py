"""End-to-end harness: a real kube-apiserver, etcd and Kueue on 127.0.0.1 (see NOTES.md)."""
