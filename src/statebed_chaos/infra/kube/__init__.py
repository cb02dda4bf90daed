"""A single-node Kubernetes cluster on this machine, built from upstream sources (`make kube-tools`).

Everything of the cluster (etcd, the control plane, containerd, the kubelet, the CNI bridge, the
pods) lives in one network namespace the cluster makes and removes (`netns`), so no pod or
service address appears in the root namespace; tools reach it with `nsenter --net`. Its files
are under one directory (`layout.ClusterDir`), its processes are recorded there by identity, and
`down` stops exactly those, unmounts what was mounted under the directory and removes the
namespace, whatever state `up` left. See docs/kubernetes.md.
"""
