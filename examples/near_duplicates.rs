//! Fingerprint a handful of documents, then find near-duplicates two ways:
//! all pairs at once (`find_all`), and one query against in-memory tables.
//!
//! Run with `cargo run --release --example near_duplicates`.

use simhashdb::batch::{clusters, find_all};
use simhashdb::plan::Plan;
use simhashdb::search::PermutedTables;
use simhashdb::{Simhasher, hamming};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let docs = [
        "Licensed under the Apache License, Version 2.0 (the License); you may not use this file \
         except in compliance with the License. You may obtain a copy of the License at the address \
         below. Unless required by applicable law or agreed to in writing, software distributed under \
         the License is distributed on an AS IS BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND.",
        "Licensed under the Apache License, Version 2.0 (the License); you may not use this file \
         except in compliance with the License. You may obtain a copy of the License at the link \
         below. Unless required by applicable law or agreed to in writing, software distributed under \
         the License is distributed on an AS IS BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND.",
        "Permission is hereby granted, free of charge, to any person obtaining a copy of this software \
         and associated documentation files, to deal in the Software without restriction, including \
         without limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, \
         and/or sell copies of the Software.",
    ];
    let hasher = Simhasher::default();
    let fps: Vec<u64> = docs.iter().map(|d| hasher.fingerprint(d)).collect();
    for (i, fp) in fps.iter().enumerate() {
        println!("doc {i}: {fp:016x}");
    }
    println!("distance(0, 1) = {}", hamming(fps[0], fps[1]));
    println!("distance(0, 2) = {}", hamming(fps[0], fps[2]));

    let plan = Plan::new(6, 3)?;
    println!("pairs within 3 bits: {:?}", find_all(&fps, &plan));
    println!("clusters: {:?}", clusters(&fps, &plan));

    let tables = PermutedTables::new(&fps, &plan);
    for hit in tables.query(fps[1], 3)? {
        println!(
            "query doc 1 -> {:016x} at distance {}",
            hit.fingerprint, hit.distance
        );
    }
    Ok(())
}
