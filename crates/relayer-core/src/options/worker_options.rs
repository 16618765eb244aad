//! The `worker_options!` macro: one declaration per worker options type gives the type, its
//! builder (which is also its serde form), getters, setters, defaults, serde and the
//! fingerprint. A caller imports what the expansion names: `OptionsError`, `SettingValue`,
//! `sha1_hex` and serde's four traits.

/// Declares a worker's options: the validated type, its builder (which is also its serde
/// form), a setter and a getter per field, defaults, serde and the fingerprint. The
/// builder's hand-written `check` holds the rules.
macro_rules! worker_options {
    (
        $(#[doc = $doc:literal])*
        $Options:ident built by $Builder:ident in section $section:literal {
            $(
                $(#[doc = $field_doc:literal])*
                $(#[serde($($serde:tt)*)])*
                $field:ident: $type:ty = $default:expr;
            )+
        }
    ) => {
        $(#[doc = $doc])*
        ///
        #[doc = concat!(
            "Made by [`", stringify!($Builder), "::build`] or by deserializing; both validate, ",
            "so a value that exists is valid. [`Default`] gives the reference values."
        )]
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $Options {
            settings: $Builder,
        }

        #[doc = concat!(
            "Builds [`", stringify!($Options), "`]: every field starts at its default, ",
            "[`build`](", stringify!($Builder), "::build) validates them all. ",
            "Also the serde form, so it may be deserialized, adjusted and built."
        )]
        #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct $Builder {
            $(
                $(#[doc = $field_doc])*
                $(#[serde($($serde)*)])*
                $field: $type,
            )+
        }

        impl Default for $Builder {
            fn default() -> Self {
                $Builder { $($field: $default,)+ }
            }
        }

        impl $Builder {
            $(
                $(#[doc = $field_doc])*
                pub fn $field(mut self, value: $type) -> Self {
                    self.$field = value;
                    self
                }
            )+

            /// Validates every field, naming the first one refused.
            pub fn build(self) -> Result<$Options, OptionsError> {
                self.check()?;
                Ok($Options { settings: self })
            }
        }

        impl $Options {
            /// The configuration section, which prefixes field names in errors.
            pub const SECTION: &'static str = $section;

            /// A builder starting from the defaults.
            pub fn builder() -> $Builder {
                $Builder::default()
            }

            /// A builder starting from these options.
            pub fn to_builder(&self) -> $Builder {
                self.settings.clone()
            }

            $(
                $(#[doc = $field_doc])*
                pub fn $field(&self) -> $type {
                    self.settings.$field
                }
            )+

            /// Every setting as `name=value`, sorted by name and joined by `;`: a canonical
            /// text for logs and for the fingerprint.
            pub fn canonical_settings(&self) -> String {
                let mut pairs = [$((stringify!($field), SettingValue::render(self.settings.$field)),)+];
                pairs.sort();
                pairs.iter().map(|(name, value)| format!("{name}={value}")).collect::<Vec<_>>().join(";")
            }

            /// A stable fingerprint of these options (OPT-4): the SHA-1, in hex, of the
            /// section and the [canonical settings](Self::canonical_settings). Replicas
            /// sharing a namespace must have equal fingerprints.
            pub fn fingerprint(&self) -> String {
                sha1_hex(&format!("{}\n{}", Self::SECTION, self.canonical_settings()))
            }
        }

        impl Default for $Options {
            fn default() -> Self {
                // The defaults are the reference values; a unit test builds them.
                $Options { settings: $Builder::default() }
            }
        }

        impl TryFrom<$Builder> for $Options {
            type Error = OptionsError;

            fn try_from(builder: $Builder) -> Result<Self, OptionsError> {
                builder.build()
            }
        }

        impl From<$Options> for $Builder {
            fn from(options: $Options) -> Self {
                options.settings
            }
        }

        impl Serialize for $Options {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                self.settings.serialize(serializer)
            }
        }

        impl<'de> Deserialize<'de> for $Options {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                $Builder::deserialize(deserializer)?.build().map_err(serde::de::Error::custom)
            }
        }
    };
}

// The consumer's options (consumer.rs) are declared with the same macro.
pub(crate) use worker_options;
