//! The starting pack (`starter`, version [`VERSION`]): rules an operator switches on per
//! direction by group. Heuristics, not a guarantee: a secret of a format it does not know, a
//! card number written in words, or an instruction phrased another way passes (docs/content-guard.md).

use super::detectors::Detector;
use super::settings::{Action, RuleSettings, StarterGroup, StarterSettings};

/// The pack's name, which starts its rules' ids.
pub const NAME: &str = "starter";

/// The pack's version: bumped whenever a rule changes, and named with every verdict.
pub const VERSION: &str = "1";

/// Phrasing that tries to override the agent's instructions, by rule id (case ignored).
const OVERRIDES: &[(&str, &str)] = &[
    (
        "ignore-previous-instructions",
        r"(?-u:\b)(?:ignore|skip|bypass)\s+(?:all\s+|any\s+)?(?:of\s+)?(?:the\s+|your\s+|my\s+)?(?:previous|prior|above|earlier|preceding|original)\s+(?:instructions|directions|prompts?|rules|guidelines)(?-u:\b)",
    ),
    (
        "disregard-instructions",
        r"(?-u:\b)(?:disregard|override)\s+(?:all\s+|any\s+)?(?:of\s+)?(?:the\s+|your\s+)?(?:previous|prior|above|earlier|original|system)\s+(?:instructions|prompts?|rules|guidelines)(?-u:\b)",
    ),
    (
        "forget-instructions",
        r"(?-u:\b)forget\s+(?:all\s+|everything\s+)?(?:you\s+(?:were|have\s+been)\s+told|(?:your|the)\s+(?:instructions|rules|guidelines))(?-u:\b)",
    ),
    (
        "reveal-system-prompt",
        r"(?-u:\b)(?:reveal|print|show|repeat|output|leak)\s+(?:me\s+)?(?:your|the)\s+(?:system\s+prompt|hidden\s+instructions|initial\s+instructions)(?-u:\b)",
    ),
    (
        "role-override",
        r"(?-u:\b)you\s+are\s+now\s+(?:DAN|in\s+developer\s+mode|jailbroken|unrestricted|no\s+longer\s+bound)(?-u:\b)",
    ),
];

/// The secrets group's detectors.
const SECRETS: &[Detector] = &[
    Detector::AwsAccessKey,
    Detector::GithubToken,
    Detector::SlackToken,
    Detector::OpenaiKey,
    Detector::StripeKey,
    Detector::GoogleApiKey,
    Detector::PrivateKey,
    Detector::Jwt,
    Detector::PeergateToken,
];

/// The rules of the groups `settings` switches on, each with the directions it applies in.
pub(super) fn rules(settings: &StarterSettings) -> Vec<RuleSettings> {
    let mut groups: Vec<StarterGroup> = (settings.inbound.iter())
        .chain(&settings.outbound)
        .copied()
        .collect();
    groups.sort_unstable();
    groups.dedup();
    let mut rules = Vec::new();
    for group in groups {
        let mut directions = Vec::new();
        if settings.inbound.contains(&group) {
            directions.push(super::Direction::Inbound);
        }
        if settings.outbound.contains(&group) {
            directions.push(super::Direction::Outbound);
        }
        for mut rule in group_rules(group, &settings.actions) {
            rule.directions.clone_from(&directions);
            rules.push(rule);
        }
    }
    rules
}

/// A group's rules, with the operator's action for the group when it names one.
fn group_rules(
    group: StarterGroup,
    actions: &super::settings::StarterActions,
) -> Vec<RuleSettings> {
    match group {
        StarterGroup::Secrets => {
            let action = actions.secrets.unwrap_or(Action::Mask);
            SECRETS.iter().map(|&d| detected(d, action)).collect()
        }
        StarterGroup::PersonalData => {
            let action = actions.personal_data.unwrap_or(Action::Mask);
            vec![
                detected(Detector::PaymentCard, action),
                detected(Detector::Iban, action),
                detected(
                    Detector::Email,
                    actions.personal_data.unwrap_or(Action::Record),
                ),
            ]
        }
        StarterGroup::InstructionOverride => {
            let action = actions.instruction_override.unwrap_or(Action::Deny);
            (OVERRIDES.iter())
                .map(|(id, pattern)| RuleSettings {
                    pattern: Some((*pattern).to_owned()),
                    case_insensitive: true,
                    ..rule(id, action)
                })
                .collect()
        }
    }
}

fn detected(detector: Detector, action: Action) -> RuleSettings {
    RuleSettings {
        detector: Some(detector),
        ..rule(detector.as_str(), action)
    }
}

fn rule(id: &str, action: Action) -> RuleSettings {
    RuleSettings::new(id, action)
}
