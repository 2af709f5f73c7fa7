# A system job: one nfkeeper on every Linux client node, in the host network. It keeps its own
# masquerade rules and collects what dead allocations leave behind in iptables' tables, with the
# live allocation ids read from this node's Nomad agent API on every pass. The gc section's two
# tables reach everything Nomad's CNI plugins write for an allocation (docs/gc.md, "One
# allocation, as the plugins write it"): in nat, bridge's POSTROUTING jump tagged
# name: "nomad" id: "<alloc id>" and its CNI-<hash> chain, portmap's CNI-HOSTPORT-DNAT jump tagged
# dnat name: "nomad" id: "<alloc id>" and its CNI-DN-<hash> chain; in filter, the firewall
# plugin's two untagged CNI-FORWARD rules for the allocation's address.
#
# The docker driver must allow what the task asks for, in the client's plugin block:
#
#   plugin "docker" {
#     config {
#       allow_caps = ["audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod",
#                     "net_bind_service", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot",
#                     "net_admin"]          # the defaults plus net_admin
#       volumes { enabled = true }          # the bind mounts of /run/nfkeeper, /var/lib/nfkeeper, /var/cache/nfkeeper
#     }
#   }
#
# With ACLs on, the task's workload identity (NOMAD_TOKEN, below) needs to list allocations:
#   nomad acl policy apply -namespace default -job nfkeeper nfkeeper-gc policy.hcl
# with policy.hcl: namespace "*" { capabilities = ["read-job"] }
#
# On hosts still on iptables-legacy the CNI chains live in x_tables, which nfkeeper cannot read
# over netlink: run `nfkeeper gc --backend iptables-legacy` instead (docs/gc.md).

variable "image" {
  type    = string
  default = "localhost/nfkeeper:0.1.0"
}

job "nfkeeper" {
  type     = "system"
  priority = 90

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

  group "nfkeeper" {
    network {
      mode = "host"
    }

    task "nfkeeper" {
      driver = "docker"

      # Root, as the DaemonSet runs it (runAsUser: 0), with net_admin as its only capability (below),
      # not the image's uid 65534: the bind-mounted host directories are root's (made 0755 by root),
      # and nfkeeper writes its restart record, owners state and compile cache only into a directory
      # of its own user (docs/cli.md): as 65534 it would keep none of them. Root without
      # dac_override still writes only what root owns.
      user = "0"

      # NOMAD_TOKEN in the task's environment: what gc.live.nomad sends to the agent.
      identity {
        env = true
      }

      config {
        image        = var.image
        network_mode = "host"
        cap_drop     = ["all"]
        cap_add      = ["net_admin"]
        args         = ["run", "--config", "/local/config.yaml", "--interval", "1s", "--metrics", "127.0.0.1:9469"]

        # The owners control socket and the owners state file live on the node, so agents can
        # reach the socket and registered owners survive a task restart (docs/owners.md).
        mount {
          type   = "bind"
          source = "/run/nfkeeper"
          target = "/run/nfkeeper"
        }
        mount {
          type   = "bind"
          source = "/var/lib/nfkeeper"
          target = "/var/lib/nfkeeper"
        }
        # The compile cache (--cache-dir) outlives the task and a reboot: a start with an unchanged
        # config does not compile it.
        mount {
          type   = "bind"
          source = "/var/cache/nfkeeper"
          target = "/var/cache/nfkeeper"
        }
      }

      # HCL interpolates ${...} inside this heredoc: write $${NAME} for a config variable.
      template {
        destination = "local/config.yaml"
        change_mode = "signal"
        change_signal = "SIGHUP"
        data = <<EOT
tables:
  - family: ip
    name: nfkeeper
    chains:
      - name: postrouting
        type: nat
        hook: postrouting
        priority: srcnat
        rules:
          - ip saddr 172.26.64.0/20 ip daddr != 224.0.0.0/4 masquerade
gc:
  enabled: true
  foreign:
    - { family: ip, table: nat, owner: nomad }
    - { family: ip, table: filter, owner: nomad }
  live:
    nomad:
      address: http://127.0.0.1:4646
  grace: 5m
  interval: 30s
EOT
      }

      # Sized from the measured start-up peaks (docs/install.md, "Memory"): the reservation above the
      # largest (100,000 rules), the ceiling the systemd unit's MemoryMax and the DaemonSet's limit,
      # with room for a reload holding two configs. memory_max applies where the cluster enables
      # memory oversubscription; without it `memory` is the hard limit.
      resources {
        cpu        = 50
        memory     = 192
        memory_max = 512
      }

      # Rules stay in place when the task stops; kill_timeout only bounds the exit.
      kill_timeout = "10s"
    }
  }
}
