# A periodic job: every 2 seconds a run of it starts (a job of its own,
# <id>@<slot>), unless the previous run still lives (overlap forbid).
#
#   herd job run examples/cron.hcl      # then: herd job status ID, herd job cancel ID
name = "heartbeat-file"

schedule {
  cron    = "@every 2s"
  overlap = "forbid"
}

stage "stamp" {
  task {
    command = ["sh", "-c", "date -u +%FT%TZ"]
  }
}
