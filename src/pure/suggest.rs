//! "Did you mean …?": the one rule for suggesting the word a user probably meant, shared by
//! the schema check of HAProxy keywords (`pure::haproxy::keywords`) and the kinds a config
//! watches (`pure::watched_kinds`). A candidate is suggested when it is the closest by edit
//! distance, ignoring case, and at most a third of the longer word's characters differ.

/// Levenshtein distance between two words, counted in bytes (keywords and kinds are ASCII).
pub fn edit_distance(left: &str, right: &str) -> usize {
    let right = right.as_bytes();
    let mut previous: Vec<usize> = (0..=right.len()).collect();
    let mut current = vec![0; right.len() + 1];
    for (i, left_byte) in left.bytes().enumerate() {
        current[0] = i + 1;
        for (j, right_byte) in right.iter().enumerate() {
            let substitution = previous[j] + usize::from(left_byte != *right_byte);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[right.len()]
}

/// The candidate closest to `word` (ignoring case), when it is close enough: at most a
/// third of the longer word's characters differ. The first of equally close candidates wins.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let wanted = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|candidate| {
            let distance = edit_distance(&wanted, &candidate.to_ascii_lowercase());
            (distance, candidate)
        })
        .filter(|(distance, candidate)| distance * 3 <= wanted.len().max(candidate.len()))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }

    #[test]
    fn the_closest_candidate_is_suggested_ignoring_case_when_a_third_or_less_differs() {
        let kinds = ["Ingress", "Service", "EndpointSlice", "Secret"];
        assert_eq!(closest("Servce", kinds), Some("Service"));
        assert_eq!(closest("service", kinds), Some("Service"));
        assert_eq!(closest("EndpointSlices", kinds), Some("EndpointSlice"));
        assert_eq!(closest("ConfigMap", kinds), None, "nothing is close");
        assert_eq!(closest("", kinds), None);
    }
}
