//! The values flags take, checked the same way wherever a flag is declared (`args.rs`,
//! `dispatch.rs`): an error is the reason the flag's value is refused.

/// A flag's value, or why it is refused.
pub(super) type Checked<T> = Result<T, &'static str>;

/// Puts a given flag's value into its field (an absent flag keeps the default).
pub(super) fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

pub(super) fn number(v: &str) -> Checked<u64> {
    v.parse().map_err(|_| "not a number")
}

pub(super) fn count_u32(v: &str) -> Checked<u32> {
    u32::try_from(number(v)?).map_err(|_| "must be at most 4294967295")
}

pub(super) fn boolean(v: &str) -> Checked<bool> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("must be `true` or `false`"),
    }
}
