//! GET_TOPICS_OF_NAMESPACE, which every client's pattern subscription asks (and asks again to
//! find topics created later).

mod common;

use common::{http, produce, start_broker, Raw};
use wire::proto::{base_command::Type, command_get_topics_of_namespace::Mode, BaseCommand};

fn topics_of(c: &mut Raw, request_id: u64, namespace: &str, mode: Mode) -> Vec<String> {
    c.send(&BaseCommand {
        r#type: Type::GetTopicsOfNamespace as i32,
        get_topics_of_namespace: Some(Box::new(wire::proto::CommandGetTopicsOfNamespace {
            request_id,
            namespace: namespace.into(),
            mode: Some(mode as i32),
            topics_pattern: Some("persistent://public/default/a-.*".into()),
            ..Default::default()
        })),
        ..Default::default()
    });
    let r = c
        .expect(Type::GetTopicsOfNamespaceResponse)
        .command
        .get_topics_of_namespace_response
        .unwrap();
    assert_eq!(r.request_id, request_id);
    // Not filtered by the pattern: the client applies it.
    assert_eq!((r.filtered, r.changed), (Some(false), Some(true)));
    r.topics
}

#[test]
fn the_namespace_lists_its_persistent_topics_as_they_appear() {
    let b = start_broker(&[]);
    let mut c = Raw::connected(&b);
    assert!(topics_of(&mut c, 1, "public/default", Mode::Persistent).is_empty());
    produce(&b, "persistent://public/default/a-2", 1, 1);
    produce(&b, "persistent://public/default/a-1", 1, 1);
    assert_eq!(
        http(&b, "PUT", "/admin/v2/namespaces/public/other", "").0,
        204
    );
    produce(&b, "persistent://public/other/a-3", 1, 1);
    let want = [
        "persistent://public/default/a-1",
        "persistent://public/default/a-2",
    ];
    assert_eq!(
        topics_of(&mut c, 2, "public/default", Mode::Persistent),
        want
    );
    assert_eq!(topics_of(&mut c, 3, "public/default", Mode::All), want);
    assert!(topics_of(&mut c, 4, "public/default", Mode::NonPersistent).is_empty());
    assert_eq!(
        topics_of(&mut c, 5, "public/other", Mode::Persistent),
        ["persistent://public/other/a-3"]
    );
}
