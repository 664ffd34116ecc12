//! Load spread of the ketama ring: coefficient of variation of keys per node (100 nodes, weight 1)
//! at several points per weight. Run with `cargo run --release --example ring_spread`.

use std::net::SocketAddr;

use lb_common::placement::ring::{Ring, RingNode};

/// Keys per trial: 10 000 per node keeps sampling noise (~1 %) well below the ring's own spread.
const KEYS: u32 = 1_000_000;
/// Node sets per points-per-weight setting (different addresses) to average out one lucky ring.
const TRIALS: u8 = 5;

fn cv(counts: &[u64]) -> f64 {
    let n = counts.len() as f64;
    let mean = counts.iter().sum::<u64>() as f64 / n;
    let var = counts.iter().map(|&c| (c as f64 - mean).powi(2)).sum::<f64>() / n;
    var.sqrt() / mean
}

fn main() {
    println!("points_per_weight,trial,points,cv_keys_per_node,max_over_mean");
    for ppw in [16u32, 40, 160] {
        let mut cvs = Vec::new();
        for trial in 0..TRIALS {
            let nodes: Vec<RingNode> = (0..100u8)
                .map(|i| RingNode { addr: SocketAddr::from(([10, trial, 0, i + 1], 6379)), weight: 1 })
                .collect();
            let ring = Ring::build(&nodes, ppw).expect("valid ring");
            let mut counts = vec![0u64; nodes.len()];
            for k in 0..KEYS {
                let key = format!("user:{k}:profile");
                let node = ring.node_index(key.as_bytes()).expect("non-empty ring");
                counts[node.0 as usize] += 1;
            }
            let c = cv(&counts);
            let max = *counts.iter().max().expect("100 nodes") as f64 / (f64::from(KEYS) / 100.0);
            println!("{ppw},{trial},{},{c:.4},{max:.3}", ring.point_count());
            cvs.push(c);
        }
        let mean = cvs.iter().sum::<f64>() / cvs.len() as f64;
        println!("# points_per_weight {ppw}: mean cv {mean:.4} over {TRIALS} node sets");
    }
}
