//! A client of the test S3 server (`./scripts/test` starts it), for tests
//! that look at or damage what sbxd stored there.

use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

/// A client of the test bucket.
pub fn s3_client() -> impl ObjectStore {
    let (endpoint, bucket) = super::test_s3();
    AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .with_access_key_id(std::env::var("SBX_TEST_S3_ACCESS_KEY").unwrap())
        .with_secret_access_key(std::env::var("SBX_TEST_S3_SECRET_KEY").unwrap())
        .build()
        .unwrap()
}

/// The keys under `prefix`, sorted.
pub async fn keys_under(s3: &impl ObjectStore, prefix: &str) -> Vec<String> {
    let prefix = ObjectPath::from(prefix);
    let mut keys: Vec<String> = s3
        .list(Some(&prefix))
        .map(|m| m.unwrap().location.to_string())
        .collect()
        .await;
    keys.sort();
    keys
}
