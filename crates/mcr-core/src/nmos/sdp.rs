//! A sender's SDP (its IS-05 transport file and IS-04 manifest): MPEG-TS
//! over RTP (payload type 33, RFC 3551), as BCP-006-04 writes it, to the
//! output's destination, with an RFC 4570 source filter when the source
//! is known. Written with `sdp-types`.

use std::net::IpAddr;

use sdp_types::{Attribute, Connection, Media, MediaType, Origin, Session, Time, TransportProto};

use super::SdpLeg;

/// The SDP of one sender.
pub fn sender_sdp(leg: &SdpLeg<'_>) -> String {
    let to = leg.destination.ip();
    let origin_address = leg.source.unwrap_or(match to {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    });
    // The session id: the sender id's first 8 bytes as a number (an SDP
    // session id is numeric); its version, the sender's version's seconds.
    let id = leg.session.as_u128() >> 64;
    let mut session = Session::new(Origin::with_ip_addr(id, leg.version.secs, origin_address), leg.label);
    session.add_time(Time::new(0, 0));
    let mut media = Media::new(MediaType::Video, leg.destination.port(), TransportProto::RtpAvp, "33");
    let ttl = to.is_multicast().then_some(leg.ttl);
    media.add_connection(Connection::from_ip_addr_ttl(to, ttl));
    if let (Some(source), true) = (leg.source, to.is_multicast()) {
        let family = if to.is_ipv4() { "IP4" } else { "IP6" };
        // RFC 4570's form has a space after the colon (`a=source-filter:
        // incl ...`), which IS-05's checks read; the typed attribute writes
        // none, so the value carries it.
        media.add_attribute(Attribute::with_value(
            "source-filter",
            format!(" incl IN {family} {to} {source}"),
        ));
    }
    media.add_attribute(Attribute::with_value("rtpmap", "33 MP2T/90000"));
    session.add_media(media);
    let mut out = Vec::new();
    // (Writing to a Vec cannot fail.)
    let _ = session.write(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}
