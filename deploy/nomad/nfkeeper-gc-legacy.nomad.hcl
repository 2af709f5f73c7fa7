# For Linux clients still on iptables-legacy, where the CNI chains live in x_tables, which the
# nfkeeper system job's GC (netlink, nf_tables) cannot see: every 5 minutes on every client,
# `nfkeeper gc --backend iptables-legacy` removes what dead allocations left behind, in one
# iptables-legacy-restore (docs/gc.md, "Hosts still on iptables-legacy"). The grace is kept across
# runs in gc.state on the node. Its nat and filter tables reach everything Nomad's CNI plugins
# write for an allocation: the tagged jumps of bridge and portmap (`dnat name: "nomad" ...`), the
# CNI-<hash> and CNI-DN-<hash> chains behind them, and the firewall plugin's untagged CNI-FORWARD
# rules for the dead allocation's address (docs/gc.md). Run it only on legacy clients (the constraint below needs a node
# meta value you set: meta { iptables = "legacy" } in the client config).
#
# The image needs the iptables package (iptables-legacy-save/-restore). The docker driver must
# allow net_admin and net_raw (x_tables is read and written through a raw socket) in allow_caps,
# and bind mounts (volumes { enabled = true }). /run/xtables.lock is the host's, so the restore
# waits for the host's own iptables users instead of racing them.

variable "image" {
  type    = string
  default = "localhost/nfkeeper:0.1.0"
}

job "nfkeeper-gc-legacy" {
  type     = "sysbatch"
  priority = 70

  periodic {
    crons            = ["*/5 * * * *"]
    prohibit_overlap = true
  }

  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  # The architectures the image exists for (scripts/image.sh: amd64; --arch arm64 under a tag of
  # its own). With both pushed as one manifest list (docs/install.md, Architectures):
  # operator = "regexp", value = "^(amd64|arm64)$".
  constraint {
    attribute = "${attr.cpu.arch}"
    value     = "amd64"
  }

  constraint {
    attribute = "${meta.iptables}"
    value     = "legacy"
  }

  group "gc" {
    network {
      mode = "host"
    }

    task "gc" {
      driver = "docker"

      identity {
        env = true
      }

      config {
        image        = var.image
        network_mode = "host"
        cap_drop     = ["all"]
        cap_add      = ["net_admin", "net_raw"]
        args         = ["gc", "--backend", "iptables-legacy", "--config", "/local/gc.yaml"]

        mount {
          type   = "bind"
          source = "/var/lib/nfkeeper"
          target = "/var/lib/nfkeeper"
        }
        mount {
          type   = "bind"
          source = "/run/xtables.lock"
          target = "/run/xtables.lock"
        }
      }

      template {
        destination = "local/gc.yaml"
        data = <<EOT
tables: []
gc:
  foreign:
    - { family: ip, table: nat, owner: nomad }
    - { family: ip, table: filter, owner: nomad }
  live:
    nomad:
      address: http://127.0.0.1:4646
  grace: 5m
  state: /var/lib/nfkeeper/gc-legacy-state.json
EOT
      }

      resources {
        cpu    = 50
        memory = 96
      }
    }
  }
}
