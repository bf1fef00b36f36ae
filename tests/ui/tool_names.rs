use idem_tools::{idempotent, read_only, tool_impl};

/// Not ASCII: model APIs refuse the name.
#[idempotent]
async fn envoyer_réponse(to: String) -> Result<String, idem_tools::Error> {
    Ok(to)
}

/// An explicit name with a dot and a space.
#[idempotent(name = "billing.charge card")]
async fn charge(cents: u64) -> Result<u64, idem_tools::Error> {
    Ok(cents)
}

#[read_only(name = "search docs")]
fn search(query: &str) -> usize {
    query.len()
}

#[derive(Clone)]
struct CustomerRelationshipManagementIntegration;

/// `Type__method` longer than 64 characters.
#[tool_impl(same_service)]
impl CustomerRelationshipManagementIntegration {
    #[idempotent]
    pub async fn synchronize_every_contact_record(&self, n: u32) -> Result<u32, idem_tools::Error> {
        Ok(n)
    }

    /// With a name that fits, it is fine.
    #[idempotent(name = "crm_sync_contacts")]
    pub async fn synchronize_every_contact_record_again(
        &self,
        n: u32,
    ) -> Result<u32, idem_tools::Error> {
        Ok(n)
    }
}

fn main() {}
