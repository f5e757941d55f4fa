//! SDP, written and read with `sdp-types`.
//!
//! - A sender's SDP (its IS-05 transport file and IS-04 manifest): RTP to
//!   the output's destination, with an RFC 4570 source filter when the
//!   source is known; MPEG-TS (payload type 33, RFC 3551) as BCP-006-04
//!   writes it, unless a controller gave the rule's receiver an SDP, whose
//!   media format (`m=` format, `a=rtpmap`, `a=fmtp`) it then carries.
//! - A receiver's transport file: each leg's group (or unicast address),
//!   port and source filter, two legs grouped by RFC 7104's `a=group:DUP`,
//!   and what the content is ([`Content`]).

use std::net::IpAddr;

use sdp_types::{Attribute, Connection, Media, MediaType, Origin, Session, Time, TransportProto};
use serde_json::{Map, Value, json};

use super::SdpLeg;

/// The sender's SDP.
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
    let rtp = leg.content.rtp.as_ref();
    let media_type = match rtp.map(|r| r.media.as_str()) {
        Some("audio") => MediaType::Audio,
        Some("application") => MediaType::Application,
        _ => MediaType::Video,
    };
    let fmt = rtp.map_or("33", |r| r.payload_type.as_str());
    let mut media = Media::new(media_type, leg.destination.port(), TransportProto::RtpAvp, fmt);
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
    match rtp {
        Some(r) => {
            if let Some(map) = &r.rtpmap {
                media.add_attribute(Attribute::with_value("rtpmap", format!("{fmt} {map}")));
            }
            if let Some(fmtp) = &r.fmtp {
                media.add_attribute(Attribute::with_value("fmtp", format!("{fmt} {fmtp}")));
            }
        }
        None => media.add_attribute(Attribute::with_value("rtpmap", "33 MP2T/90000")),
    }
    session.add_media(media);
    let mut out = Vec::new();
    // (Writing to a Vec cannot fail.)
    let _ = session.write(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// What a stream carries, as its Flow and Source say it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Content {
    /// The RTP format an SDP gave (none: MPEG-TS, payload type 33).
    pub rtp: Option<RtpFormat>,
}

/// An RTP media format, from an SDP's `m=`, `a=rtpmap` and `a=fmtp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtpFormat {
    /// `video`, `audio`, ...
    pub media: String,
    /// The payload type (the `m=` line's format).
    pub payload_type: String,
    /// The rtpmap's value after the payload type (`raw/90000`).
    pub rtpmap: Option<String>,
    /// The fmtp's value after the payload type.
    pub fmtp: Option<String>,
}

impl Content {
    /// The encoding name (`raw`, `L24`, `MP2T`...), from the rtpmap or the
    /// static payload type.
    fn encoding(&self) -> (String, Option<&str>) {
        let Some(r) = &self.rtp else {
            return ("MP2T".into(), None);
        };
        let map = r.rtpmap.as_deref().unwrap_or(match r.payload_type.as_str() {
            "33" => "MP2T/90000",
            _ => "",
        });
        let name = map.split('/').next().unwrap_or("").to_string();
        (name, Some(map))
    }

    /// The fmtp's `key=value` pairs.
    fn fmtp(&self) -> Vec<(String, String)> {
        let Some(f) = self.rtp.as_ref().and_then(|r| r.fmtp.as_deref()) else {
            return Vec::new();
        };
        f.split(';')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
                None => (p.to_string(), String::new()),
            })
            .collect()
    }

    /// The NMOS format URN and media type.
    pub fn format(&self) -> (&'static str, String) {
        let (name, _) = self.encoding();
        let media = self.rtp.as_ref().map_or("video", |r| r.media.as_str());
        match (media, name.as_str()) {
            (_, "MP2T") => ("urn:x-nmos:format:mux", "video/MP2T".into()),
            (_, "SMPTE2022-6") => ("urn:x-nmos:format:mux", "video/SMPTE2022-6".into()),
            ("video", "raw") => ("urn:x-nmos:format:video", "video/raw".into()),
            ("audio", "L16" | "L20" | "L24") => ("urn:x-nmos:format:audio", format!("audio/{name}")),
            ("video", "smpte291") => ("urn:x-nmos:format:data", "video/smpte291".into()),
            (m, n) if !n.is_empty() => ("urn:x-nmos:format:mux", format!("{m}/{n}")),
            (m, _) => ("urn:x-nmos:format:mux", format!("{m}/unknown")),
        }
    }

    /// The Flow's fields beside its core ones: format, media type and what
    /// the format asks for (a raw video's size, colour and components, an
    /// audio's rate and depth).
    pub fn flow_fields(&self) -> Map<String, Value> {
        let (format, media_type) = self.format();
        let mut m = Map::new();
        m.insert("format".into(), json!(format));
        m.insert("media_type".into(), json!(media_type));
        let fmtp = self.fmtp();
        let get = |k: &str| {
            fmtp.iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.as_str())
        };
        let num = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok());
        match format {
            "urn:x-nmos:format:video" => {
                let (w, h) = (num("width").unwrap_or(0), num("height").unwrap_or(0));
                m.insert("frame_width".into(), json!(w));
                m.insert("frame_height".into(), json!(h));
                m.insert("colorspace".into(), json!(get("colorimetry").unwrap_or("BT709")));
                let interlaced = fmtp.iter().any(|(n, _)| n.eq_ignore_ascii_case("interlace"));
                m.insert(
                    "interlace_mode".into(),
                    json!(if interlaced { "interlaced_tff" } else { "progressive" }),
                );
                if let Some(t) = get("TCS") {
                    m.insert("transfer_characteristic".into(), json!(t));
                }
                if let Some((n, d)) = get("exactframerate").map(rate) {
                    m.insert("grain_rate".into(), json!({"numerator": n, "denominator": d}));
                }
                let depth = num("depth").unwrap_or(10);
                let sampling = get("sampling").unwrap_or("YCbCr-4:2:2");
                m.insert("components".into(), Value::Array(components(sampling, w, h, depth)));
            }
            "urn:x-nmos:format:audio" => {
                let (_, map) = self.encoding();
                let rate = map
                    .and_then(|m| m.split('/').nth(1))
                    .and_then(|r| r.parse::<u64>().ok())
                    .unwrap_or(48_000);
                m.insert("sample_rate".into(), json!({"numerator": rate}));
                let depth: u64 = media_type.trim_start_matches("audio/L").parse().unwrap_or(24);
                m.insert("bit_depth".into(), json!(depth));
            }
            _ => {}
        }
        m
    }

    /// An audio stream's channels (from the rtpmap's third field), for its
    /// Source.
    pub fn channels(&self) -> Option<usize> {
        let (format, _) = self.format();
        if format != "urn:x-nmos:format:audio" {
            return None;
        }
        let (_, map) = self.encoding();
        Some(
            map.and_then(|m| m.split('/').nth(2))
                .and_then(|c| c.parse().ok())
                .unwrap_or(1),
        )
    }
}

/// `30000/1001` or `25` as (numerator, denominator).
fn rate(v: &str) -> (u64, u64) {
    match v.split_once('/') {
        Some((n, d)) => (n.parse().unwrap_or(25), d.parse().unwrap_or(1)),
        None => (v.parse().unwrap_or(25), 1),
    }
}

/// A raw video's components as ST 2110-20's sampling says.
fn components(sampling: &str, w: u64, h: u64, depth: u64) -> Vec<Value> {
    let c = |name: &str, w: u64, h: u64| json!({"name": name, "width": w, "height": h, "bit_depth": depth});
    match sampling {
        s if s.starts_with("RGB") => vec![c("R", w, h), c("G", w, h), c("B", w, h)],
        "YCbCr-4:4:4" => vec![c("Y", w, h), c("Cb", w, h), c("Cr", w, h)],
        "YCbCr-4:2:0" => vec![c("Y", w, h), c("Cb", w / 2, h / 2), c("Cr", w / 2, h / 2)],
        _ => vec![c("Y", w, h), c("Cb", w / 2, h), c("Cr", w / 2, h)],
    }
}

/// One leg of a receiver's transport file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadLeg {
    /// The `c=` address: a group, or this host's unicast address.
    pub destination: IpAddr,
    /// The `m=` port.
    pub port: u16,
    /// The source an RFC 4570 `incl` filter names, if any.
    pub source: Option<IpAddr>,
}

/// A receiver's transport file, read.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadSdp {
    /// Its legs: one per media, in the order of an `a=group:DUP`, else as
    /// they come.
    pub legs: Vec<ReadLeg>,
    /// What the first leg carries.
    pub content: Content,
}

/// Reads a receiver's transport file: every media must be RTP to an
/// address, and two or more media are legs of one stream only when an
/// `a=group:DUP` names them (RFC 7104).
pub fn read_sdp(text: &str) -> Result<ReadSdp, String> {
    let s = Session::parse(text.as_bytes()).map_err(|e| format!("the SDP cannot be read: {e}"))?;
    if s.medias.is_empty() {
        return Err("the SDP has no media (m=) line".into());
    }
    let dup: Option<Vec<String>> = s
        .attributes_typed::<sdp_types::attributes::Group>()
        .filter_map(Result::ok)
        .find(|g| g.semantics.as_str().eq_ignore_ascii_case("DUP"))
        .map(|g| g.mid_tags);
    let mid = |m: &Media| m.get_first_attribute_value("mid").flatten().map(str::to_string);
    let medias: Vec<&Media> = match &dup {
        Some(tags) => tags
            .iter()
            .map(|t| {
                s.medias
                    .iter()
                    .find(|m| mid(m).as_deref() == Some(t.as_str()))
                    .ok_or_else(|| format!("a=group:DUP names {t}, which no media's a=mid is"))
            })
            .collect::<Result<_, _>>()?,
        None if s.medias.len() > 1 => {
            return Err(format!(
                "the SDP has {} media and no a=group:DUP saying they are one stream's legs (RFC 7104)",
                s.medias.len()
            ));
        }
        None => vec![&s.medias[0]],
    };
    let mut legs = Vec::new();
    for (k, m) in medias.iter().enumerate() {
        let at = || format!("media {}", k + 1);
        if !m.proto.starts_with("RTP/") {
            return Err(format!("{}: {} is not RTP", at(), m.proto));
        }
        let c = m
            .connections
            .first()
            .or(s.connection.as_ref())
            .ok_or_else(|| format!("{}: no connection (c=) line", at()))?;
        let destination = c
            .try_address()
            .map_err(|e| format!("{}: c={}: {e}", at(), c.connection_address))?
            .ip;
        let filter = m
            .attributes_typed::<sdp_types::attributes::SourceFilter>()
            .chain(s.attributes_typed::<sdp_types::attributes::SourceFilter>())
            .filter_map(Result::ok)
            .find(|f| f.mode == sdp_types::attributes::SourceFilterMode::Incl);
        let source = match filter.as_ref().and_then(|f| f.sources.first()) {
            Some(sdp_types::attributes::SourceFilterAddress::IpAddr(a)) => Some(*a),
            Some(sdp_types::attributes::SourceFilterAddress::FQDN(n)) => {
                return Err(format!("{}: the source filter names {n}: give an address", at()));
            }
            None => None,
        };
        legs.push(ReadLeg {
            destination,
            port: m.port,
            source,
        });
    }
    let first = medias[0];
    let pt = first.fmt.split_whitespace().next().unwrap_or("").to_string();
    let value_of = |name: &str| {
        first
            .get_attribute_values(name)
            .flatten()
            .filter_map(|v| v.split_once(' '))
            .find(|(p, _)| *p == pt)
            .map(|(_, v)| v.trim().to_string())
    };
    let content = Content {
        rtp: Some(RtpFormat {
            media: first.media.clone(),
            rtpmap: value_of("rtpmap"),
            fmtp: value_of("fmtp"),
            payload_type: pt,
        }),
    };
    Ok(ReadSdp { legs, content })
}
