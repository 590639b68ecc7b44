//! Unit tests of the dataplane target.

use super::*;

#[test]
fn the_base_url_ends_in_exactly_one_v3() {
    for url in [
        "http://10.0.0.5:5555",
        "http://10.0.0.5:5555/",
        "http://10.0.0.5:5555/v3",
        "http://10.0.0.5:5555/v3/",
    ] {
        let settings = DataplaneSettings::new(url, "admin", "secret");
        assert_eq!(
            settings.base_url().expect("valid").as_str(),
            "http://10.0.0.5:5555/v3",
            "{url}"
        );
    }
    let bad = DataplaneSettings::new("ftp://10.0.0.5", "a", "b");
    assert!(matches!(
        bad.base_url(),
        Err(DataplaneSetupError::InvalidUrl { .. })
    ));
}

#[test]
fn the_password_never_shows_in_debug_output() {
    let settings = DataplaneSettings::new("http://10.0.0.5:5555", "admin", "s3cr3t");
    assert!(!format!("{settings:?}").contains("s3cr3t"));
}
