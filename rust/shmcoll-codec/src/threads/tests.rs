//! Tests of the shared thread rule: the environment variable's parsing, the size rule and
//! the runner's order of results.

use super::*;
use proptest::prelude::*;

proptest! {
    /// Any text in SHMCOLL_CODEC_THREADS is a count within range or an InvalidArgument
    /// that names the variable; never a panic, never an absurd number of threads.
    #[test]
    fn codec_threads_text_is_a_bounded_count_or_an_error(
        s in prop_oneof![
            Just("0".to_string()), Just("-1".to_string()), Just("1e300".to_string()),
            Just("nan".to_string()), Just("99999999999999999999999".to_string()),
            Just("+4".to_string()), Just("４".to_string()),
            "\\PC*", "[0-9]{1,25}",
        ]
    ) {
        match codec_threads(&s) {
            Ok(k) => prop_assert!((1..=MAX_CODEC_THREADS).contains(&k)),
            Err(CodecError::InvalidArgument(m)) => prop_assert!(m.contains("SHMCOLL_CODEC_THREADS")),
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}

/// Small calls stay on one thread; large ones never exceed one thread per
/// BYTES_PER_THREAD nor the CPUs this process may use.
#[test]
fn threads_follow_the_size_rule() {
    assert_eq!(threads_for(0).unwrap(), 1);
    assert_eq!(threads_for(2 * BYTES_PER_THREAD - 1).unwrap(), 1);
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    for k in [2, 3, 64] {
        let t = threads_for(k * BYTES_PER_THREAD).unwrap();
        assert!(t >= 1 && t <= k, "{k} MiB: {t} threads");
        if std::env::var_os("SHMCOLL_CODEC_THREADS").is_none() {
            assert_eq!(t, cpus.min(k), "{k} MiB");
        }
    }
}

/// Pieces are never empty and cover every unit; results come back in the pieces' order.
#[test]
fn pieces_cover_the_units_and_results_keep_their_order() {
    for units in [1, 2, 7, 1000] {
        for threads in 1..=9 {
            let per = units_per_piece(units, threads);
            assert!(per >= 1 && per * threads >= units && units.div_ceil(per) <= threads);
        }
    }
    let pieces: Vec<usize> = (0..13).collect();
    assert_eq!(
        map_pieces(pieces, |p| p * p),
        (0..13).map(|p| p * p).collect::<Vec<_>>()
    );
    assert!(map_pieces(Vec::<u8>::new(), |p| p).is_empty());
}
