//! The commands a Redis server ran, from `INFO commandstats`: how many per call, idem's and
//! the floor's (scripts count as their `EVALSHA` plus every command they run). Counts are of
//! the whole server: other clients of a shared server add theirs.

use std::collections::BTreeMap;

/// A connection for `INFO commandstats`.
pub struct CommandStats {
    #[cfg(feature = "redis")]
    conn: redis::aio::MultiplexedConnection,
}

/// Commands run, by name.
pub type Counts = BTreeMap<String, u64>;

impl CommandStats {
    /// A connection to `url`, if the server answers `INFO commandstats` (a managed Redis may
    /// not).
    #[cfg(feature = "redis")]
    pub async fn connect(url: &str) -> Option<CommandStats> {
        let client = redis::Client::open(url).ok()?;
        let conn = client.get_multiplexed_async_connection().await.ok()?;
        let stats = CommandStats { conn };
        stats.counts().await.map(|_| stats)
    }

    /// The server's command counts now.
    #[cfg(feature = "redis")]
    pub async fn counts(&self) -> Option<Counts> {
        let mut conn = self.conn.clone();
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .ok()?;
        Some(parse(&info))
    }

    /// Without Redis support there is nothing to count.
    #[cfg(not(feature = "redis"))]
    pub async fn counts(&self) -> Option<Counts> {
        None
    }
}

/// `cmdstat_get:calls=12,usec=…` lines as counts by command name.
#[cfg_attr(not(feature = "redis"), allow(dead_code))] // its tests run without Redis too
fn parse(info: &str) -> Counts {
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_uppercase(), calls))
        })
        .collect()
}

/// What ran between `before` and `after`, per call of `calls`: `("HGETALL", 1.0)`, ….
pub fn per_call(before: &Counts, after: &Counts, calls: u64) -> Vec<(String, f64)> {
    after
        .iter()
        .filter_map(|(name, &n)| {
            let ran = n.saturating_sub(before.get(name).copied().unwrap_or(0));
            // INFO itself ran between the two readings.
            let ran = if name == "INFO" {
                ran.saturating_sub(1)
            } else {
                ran
            };
            (ran > 0).then(|| (name.clone(), ran as f64 / calls.max(1) as f64))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_counts_are_read_from_info_and_divided_per_call() {
        let before = parse("# Commandstats\r\ncmdstat_get:calls=10,usec=5,usec_per_call=0.5\r\n");
        let after = parse(
            "# Commandstats\r\ncmdstat_get:calls=30,usec=9,usec_per_call=0.3\r\n\
             cmdstat_evalsha:calls=20,usec=1\r\ncmdstat_info:calls=1,usec=1\r\n",
        );
        assert_eq!(
            per_call(&before, &after, 20),
            [("EVALSHA".to_owned(), 1.0), ("GET".to_owned(), 1.0)]
        );
    }
}
