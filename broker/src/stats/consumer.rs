//! CONSUMER_STATS: one consumer's figures over the binary protocol (the C++ client's
//! `getBrokerConsumerStats`), from the same sources as the admin API's consumer stats.

use dispatcher::ConsumerId;
use wire::proto::{base_command::Type, BaseCommand, CommandConsumerStatsResponse, ServerError};

use crate::sync::lock;
use crate::topic::Subscription;

/// The CONSUMER_STATS_RESPONSE for consumer `id` of `sub` (`None`: the connection has no
/// such consumer; `ConsumerNotFound` in the response). Rates are not tracked per consumer here
/// (the admin API's subscription stats have them), so they are left out; `msgBacklog` is the
/// subscription's.
pub(crate) fn consumer_stats_response(
    request_id: u64,
    target: Option<(&Subscription, ConsumerId)>,
) -> BaseCommand {
    let mut r = CommandConsumerStatsResponse {
        request_id,
        ..Default::default()
    };
    let stats = target.and_then(|(sub, id)| {
        let (_, cs) = sub.runtime.stats()?;
        Some((sub, id, cs.into_iter().find(|c| c.id == id)?))
    });
    match stats {
        None => {
            r.error_code = Some(ServerError::ConsumerNotFound as i32);
            r.error_message = Some("no consumer with this id".to_owned());
        }
        Some((sub, id, c)) => {
            let info = lock(&sub.consumers).get(&id).cloned();
            r.consumer_name = Some(c.name);
            r.available_permits = Some(u64::try_from(c.permits).unwrap_or(0));
            r.unacked_messages = Some(u64::try_from(c.unacked).unwrap_or(0));
            r.blocked_consumer_on_unacked_msgs = Some(c.blocked_on_unacked);
            r.address = info.as_ref().map(|i| i.address.clone());
            r.connected_since = info.map(|i| i.connected_since);
            r.r#type = Some(sub.kind.pulsar_name().to_owned());
            r.msg_backlog = Some(sub.runtime.cursor_view().backlog.messages);
        }
    }
    BaseCommand {
        r#type: Type::ConsumerStatsResponse as i32,
        consumer_stats_response: Some(Box::new(r)),
        ..Default::default()
    }
}
