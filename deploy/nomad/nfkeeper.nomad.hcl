# A system job: one nfkeeper on every client node, in the host network.
job "nfkeeper" {
  type     = "system"
  priority = 90

  group "nfkeeper" {
    network {
      mode = "host"
    }

    task "nfkeeper" {
      driver = "docker"

      config {
        image        = "nfkeeper:0.1.0"
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
      }

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
EOT
      }

      resources {
        cpu    = 50
        memory = 128
      }

      # Rules stay in place when the task stops; kill_timeout only bounds the exit.
      kill_timeout = "10s"
    }
  }
}
